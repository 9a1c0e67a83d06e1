"""AsyncPodStore: PodStore for asyncio (docs/api.md, "asyncio"). Calls run in worker threads
(whole-file ones in a worker process: aio_process.py). A transaction belongs to the task that
opened it: its calls run on one of a few kept transaction threads, found again through a
context variable; other tasks' calls go to the shared workers and wait there, not on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import itertools
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from podstore import aio_process
from podstore.errors import PodStoreError, StoreBusyError
from podstore.pure.times import TimeArg
from podstore.reading import Reader
from podstore.sqlite import signals
from podstore.sqlite.connection import DEFAULT_BUSY_TIMEOUT, Durability
from podstore.sqlite.readonly import PAGE_ROWS, RowStream
from podstore.store import PodStore, Verify
from podstore.types import AllocationEvent

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: Worker threads (besides transaction threads), each with a connection of its own.
DEFAULT_WORKERS = 4

#: Threads hosting transaction blocks, one at a time each, kept: a thread per block stalled the
#: loop (200 blocks at once: 0.35 s). More would only wait for SQLite's one write lock; at
#: least two, so a block awaiting another's lets that one time out rather than wait for ever.
TRANSACTION_THREADS = 4

# The transactions open in this context: the task that opened one finds it again here.
_OPEN: contextvars.ContextVar[tuple[_Transaction, ...]] = contextvars.ContextVar(
    "podstore_async_transactions", default=()
)


class _ClosedAfterWith:
    """``async with x:`` gives ``x`` and closes it after the block."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _InWorker(Generic[P, R]):
    """``AsyncPodStore.name``: PodStore's method ``name`` as a coroutine run in a worker."""

    def __init__(self, method: Callable[Concatenate[PodStore, P], R]) -> None:
        self._method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _InWorker[P, R]: ...

    @overload
    def __get__(
        self, obj: AsyncPodStore, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, obj: AsyncPodStore | None, owner: type[Any]
    ) -> _InWorker[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if obj is None:
            return self
        method = self._method

        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await obj._call(
                functools.partial(method, obj.sync, *args, **kwargs), method, args, kwargs
            )

        call.__name__ = method.__name__
        call.__doc__ = method.__doc__
        return call


class AsyncPodStore(_ClosedAfterWith):
    """PodStore's methods as coroutines run in worker threads. ``await
    AsyncPodStore.open(path, ...)`` or ``AsyncPodStore(store)``; close with ``await
    astore.close()`` or ``async with``."""

    def __init__(self, store: PodStore, *, workers: int = DEFAULT_WORKERS) -> None:
        self.sync = store
        self._workers = _executor(workers)
        self._worker_count = workers
        self._tx_threads = _TransactionThreads(self)
        self._busy_timeout = store._sessions.options.busy_timeout
        _LIVE.add(self)
        self._process = aio_process.ProcessWorker(store)
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        upgrade: bool = True,
        durability: Durability = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        verify: Verify = "auto",
        workers: int = DEFAULT_WORKERS,
    ) -> AsyncPodStore:
        """PodStore.open in a worker thread (it may check every page of the file)."""
        opener = functools.partial(
            PodStore.open,
            path,
            readonly=readonly,
            upgrade=upgrade,
            durability=durability,
            busy_timeout=busy_timeout,
            verify=verify,
        )
        store = await asyncio.get_running_loop().run_in_executor(None, opener)
        return cls(store, workers=workers)

    @property
    def path(self) -> str:
        return self.sync.path

    @property
    def readonly(self) -> bool:
        return self.sync.readonly

    async def close(self) -> None:
        """Stop the worker process and threads and close the store; later calls raise
        PodStoreError."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                await _outcome(self._workers.submit(self._process.close))
            finally:
                await _outcome(self._workers.submit(self.sync.close))
        finally:
            self._workers.shutdown(wait=False)
            self._tx_threads.close()

    # ---- running calls ---------------------------------------------------------------------

    async def _call(
        self,
        fn: Callable[[], R],
        method: Callable[..., Any] | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> R:
        """Run ``fn`` in the task's open transaction, else in the worker process if it pays
        off there (aio_process.py), else on a shared worker."""
        tx = _owned(self)
        if tx is not None:
            return await tx.run(fn)
        name = aio_process.routed_name(method)
        if name is None:
            return await self._pool(fn)
        return await self._pool(functools.partial(self._in_process, fn, name, args, kwargs or {}))

    def _in_process(
        self, fn: Callable[[], R], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """In a worker thread: run ``fn`` here or in the worker process."""
        request = aio_process.process_request(name, self.sync.path, args, kwargs)
        if request is None:
            return fn()
        result: R = self._process.call(name, request)
        return result

    async def _pool(self, fn: Callable[[], R]) -> R:
        if self._closed:
            raise PodStoreError("the store is closed")
        return await _outcome(self._workers.submit(fn))

    async def _release(self, close: Callable[[], None]) -> None:
        """Close a stream or reader; nothing to do once the store is closed (that closed it)."""
        if not self._closed:
            await _outcome(self._workers.submit(close))

    def transaction(self) -> _Transaction:
        """``async with astore.transaction():`` — the entering task's calls commit as one, or
        roll back on an exception or cancellation; nests. Other tasks' calls never join it."""
        return _Transaction(self)

    # ---- the PodStore methods --------------------------------------------------------------

    insert = _InWorker(PodStore.insert)
    delete = _InWorker(PodStore.delete)
    from_checkpoint_data = _InWorker(PodStore.from_checkpoint_data)
    set_registered_devices = _InWorker(PodStore.set_registered_devices)
    pods = _InWorker(PodStore.pods)
    size = _InWorker(PodStore.size)
    has_pod = _InWorker(PodStore.has_pod)
    container_devices = _InWorker(PodStore.container_devices)
    pod_devices = _InWorker(PodStore.pod_devices)
    add_container_allocated_resources = _InWorker(PodStore.add_container_allocated_resources)
    remove_container_allocated_resources = _InWorker(PodStore.remove_container_allocated_resources)
    devices = _InWorker(PodStore.devices)
    get_container_devices = _InWorker(PodStore.get_container_devices)
    get_pod_and_container_for_device = _InWorker(PodStore.get_pod_and_container_for_device)
    device_run_container_options = _InWorker(PodStore.device_run_container_options)
    to_checkpoint_data = _InWorker(PodStore.to_checkpoint_data)
    pod_entries = _InWorker(PodStore.pod_entries)
    registered_devices = _InWorker(PodStore.registered_devices)
    import_checkpoint = _InWorker(PodStore.import_checkpoint)
    sync_checkpoint = _InWorker(PodStore.sync_checkpoint)
    export_checkpoint = _InWorker(PodStore.export_checkpoint)
    import_node_checkpoint = _InWorker(PodStore.import_node_checkpoint)
    export_node_checkpoint = _InWorker(PodStore.export_node_checkpoint)
    import_node = _InWorker(PodStore.import_node)
    history = _InWorker(PodStore.history)
    owners_at = _InWorker(PodStore.owners_at)
    prune_history = _InWorker(PodStore.prune_history)
    query = _InWorker(PodStore.query)
    stats = _InWorker(PodStore.stats)
    wait_verified = _InWorker(PodStore.wait_verified)

    async def store_id(self) -> str:
        """PodStore.store_id (read from the store on first use)."""
        return await self._call(lambda: self.sync.store_id)

    async def call(self, fn: Callable[Concatenate[PodStore, P], R], /, *args: P.args,
                   **kwargs: P.kwargs) -> R:  # fmt: skip
        """``fn(store, ...)`` in a worker (in the task's transaction if one is open)."""
        return await self._call(functools.partial(fn, self.sync, *args, **kwargs), fn, args, kwargs)

    async def reader(self, *, timeout: float | None = None, max_rows: int | None = None
                     ) -> AsyncReader:  # fmt: skip
        """PodStore.reader: a read-only snapshot whose rows stream (``async for``)."""
        reader = await self._pool(lambda: self.sync.reader(timeout=timeout, max_rows=max_rows))
        return AsyncReader(self, reader)

    async def stream(
        self,
        sql: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        max_rows: int | None = None,
    ) -> AsyncRowStream[tuple[Any, ...]]:
        """PodStore.stream: one read-only statement whose rows come ``async for``."""
        rows = await self._pool(
            lambda: self.sync.stream(sql, params, timeout=timeout, max_rows=max_rows)
        )
        return AsyncRowStream(self, rows)


# A forked child replaces these stores' executors: their idle threads are gone there.
_LIVE: weakref.WeakSet[AsyncPodStore] = weakref.WeakSet()


def _executor(workers: int) -> ThreadPoolExecutor:
    # Signals go to the main thread, where commits hold them off (sqlite/signals.py).
    return ThreadPoolExecutor(workers, "podstore", initializer=signals.keep_out)


def _new_workers_in_child() -> None:
    for astore in list(_LIVE):
        astore._workers = _executor(astore._worker_count)
        astore._tx_threads = _TransactionThreads(astore)


os.register_at_fork(after_in_child=_new_workers_in_child)


def _owned(astore: AsyncPodStore) -> _Transaction | None:
    """The innermost transaction of ``astore`` the current task opened, if any."""
    task = asyncio.current_task()
    for tx in reversed(_OPEN.get()):
        if tx.astore is astore and tx.owner is task and tx.active:
            return tx
    return None


class _BlockCalls:
    """One block's calls, run in order by its transaction thread until ``end()``."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()

    def submit(self, fn: Callable[[], R]) -> concurrent.futures.Future[R]:
        work: concurrent.futures.Future[R] = concurrent.futures.Future()
        self._calls.put((fn, work))
        return work

    def end(self) -> None:
        self._calls.put(None)

    def serve(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, work = call
            if work.set_running_or_notify_cancel():  # else cancelled before it started
                try:
                    work.set_result(fn())
                except BaseException as exc:  # the caller's to see, as an executor does
                    work.set_exception(exc)


_Call = tuple[Callable[[], Any], concurrent.futures.Future[Any]]


class _TransactionThreads:
    """Up to TRANSACTION_THREADS kept threads, one block each at a time; a block waits in
    line for one. Daemons: one held by an abandoned block must not block exit. They end with
    ``astore``, closed or collected."""

    def __init__(self, astore: AsyncPodStore) -> None:
        weakref.finalize(astore, self.close)
        self._waiting: queue.SimpleQueue[_BlockCalls | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0

    def line_up(self) -> _BlockCalls:
        calls = _BlockCalls()
        self._waiting.put(calls)
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if self._threads < TRANSACTION_THREADS:
                    self._threads += 1
                    threading.Thread(target=self._serve, name="podstore-tx", daemon=True).start()
        return calls

    def close(self) -> None:
        """Each thread ends once the blocks in line before this are done."""
        with self._lock:
            for _ in range(self._threads):
                self._waiting.put(None)
            self._threads = 0

    def _serve(self) -> None:
        signals.keep_out()
        while (calls := self._waiting.get()) is not None:
            calls.serve()
            self._idle.release()


class _Transaction:
    """``AsyncPodStore.transaction()``."""

    def __init__(self, astore: AsyncPodStore) -> None:
        self.astore = astore
        self.owner: asyncio.Task[Any] | None = None
        self.active = False
        self._thread_calls: _BlockCalls | None = None
        self._own_thread = False
        self._block: Any = None
        self._opened: tuple[_Transaction, ...] = ()

    async def run(self, fn: Callable[[], R]) -> R:
        assert self._thread_calls is not None
        return await _outcome(self._thread_calls.submit(fn))

    async def __aenter__(self) -> AsyncPodStore:
        if self.astore._closed:
            raise PodStoreError("the store is closed")
        outer = _owned(self.astore)
        block = self.astore.sync.transaction()
        begin = block.__enter__
        if outer is not None:
            calls = outer._thread_calls  # nested: a savepoint, on the outer block's thread
        else:
            calls = self.astore._tx_threads.line_up()
            self._own_thread = True
            begin = functools.partial(_begin, block, time.monotonic(), self.astore._busy_timeout)
        assert calls is not None
        self._thread_calls = calls
        work = calls.submit(begin)
        try:
            await _outcome(work)
        except BaseException:
            # It ran or runs (an interrupt on the loop, or BEGIN failed): undo it after.
            if not work.cancelled():
                calls.submit(functools.partial(_leave_if_entered, block))
            self._release_thread()
            raise
        self._block = block
        self.owner = asyncio.current_task()
        self.active = True
        self._opened = _OPEN.get()
        _OPEN.set((*self._opened, self))
        return self.astore

    def _release_thread(self) -> None:
        if self._own_thread:
            assert self._thread_calls is not None
            self._thread_calls.end()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.active = False
        _OPEN.set(self._opened)
        assert self._thread_calls is not None
        block = self._block
        # Queued behind the block's running calls. A cancellation before it starts makes it a
        # rollback (and is raised); once started, its outcome is the caller's.
        lock = threading.Lock()
        state = {"started": False, "cancelled": False}

        def finish() -> bool | None:
            with lock:
                state["started"] = True
                cancelled = state["cancelled"]
            if cancelled and exc is None:
                return bool(block.__exit__(asyncio.CancelledError, asyncio.CancelledError(), None))
            return bool(block.__exit__(exc_type, exc, tb))

        def cancel() -> bool:
            with lock:
                if not state["started"]:
                    state["cancelled"] = True
                return state["cancelled"]

        try:
            return bool(await _outcome(self._thread_calls.submit(finish), cancel))
        finally:
            self._release_thread()


def _begin(block: Any, queued: float, busy_timeout: float) -> Any:
    """BEGIN on a transaction thread, or StoreBusyError after waiting for one past busy_timeout."""
    if time.monotonic() - queued > busy_timeout:
        raise StoreBusyError(
            f"no transaction thread came free within busy_timeout ({busy_timeout:g} s): "
            "the store's other transaction() blocks held the write lock or waited for it"
        )
    return block.__enter__()


async def _outcome(
    work: concurrent.futures.Future[R], cancel: Callable[[], bool] | None = None
) -> R:
    """The outcome of ``work`` (a worker thread's). A cancellation wins only if ``work`` had
    not started (or ``cancel()`` made it a rollback): CancelledError once it ended; else it is
    withdrawn (``Task.uncancel``): never CancelledError for a call that committed (docs/api.md,
    "Interrupts, SIGTERM and cancellation")."""
    done = asyncio.wrap_future(work)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        won = work.cancel() if cancel is None else cancel()
    withdrawn = 1
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            withdrawn += 1
    if won:
        raise asyncio.CancelledError
    task = asyncio.current_task()
    if task is not None:
        for _ in range(withdrawn):
            task.uncancel()
    return done.result()


def _leave_if_entered(block: Any) -> None:
    """Roll back a transaction() whose BEGIN finished after its task was cancelled."""
    with contextlib.suppress(Exception):
        block.__exit__(asyncio.CancelledError, asyncio.CancelledError(), None)


class AsyncRowStream(_ClosedAfterWith, Generic[T]):
    """A RowStream read ``async for``: rows are fetched a page at a time in a worker."""

    def __init__(self, astore: AsyncPodStore, rows: RowStream[T]) -> None:
        self._astore = astore
        self._rows = rows
        self.columns = rows.columns
        self._page: list[T] = []
        self._done = False

    def __aiter__(self) -> AsyncRowStream[T]:
        return self

    async def __anext__(self) -> T:
        if not self._page:
            if self._done:
                raise StopAsyncIteration
            rows = self._rows
            page = await self._astore._pool(lambda: list(itertools.islice(rows, PAGE_ROWS)))
            if len(page) < PAGE_ROWS:
                self._done = True
            if not page:
                raise StopAsyncIteration
            page.reverse()
            self._page = page
        return self._page.pop()

    async def close(self) -> None:
        self._done, self._page = True, []
        await self._astore._release(self._rows.close)

    aclose = close


class AsyncReader(_ClosedAfterWith):
    """A Reader for asyncio (``AsyncPodStore.reader()``); use it ``async with``."""

    def __init__(self, astore: AsyncPodStore, reader: Reader) -> None:
        self._astore = astore
        self.sync = reader

    async def stream(self, sql: str, params: Any = None) -> AsyncRowStream[tuple[Any, ...]]:
        rows = await self._astore._pool(lambda: self.sync.stream(sql, params))
        return AsyncRowStream(self._astore, rows)

    async def history(
        self,
        pod_uid: str | None = None,
        device_id: str | None = None,
        since: TimeArg | None = None,
        until: TimeArg | None = None,
    ) -> AsyncRowStream[AllocationEvent]:
        rows = await self._astore._pool(lambda: self.sync.history(pod_uid, device_id, since, until))
        return AsyncRowStream(self._astore, rows)

    async def close(self) -> None:
        await self._astore._release(self.sync.close)
