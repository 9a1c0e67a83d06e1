"""AsyncPodStore: PodStore for asyncio callers (docs/api.md, "asyncio").

Every call runs in a worker thread, so the event loop never waits for SQLite or an fsync; the
calls that read or write a whole checkpoint file run in a worker process instead
(aio_process.py), so that the GIL the decoding and the garbage collector hold is not the
loop's. A transaction belongs to the task that opened it: ``async
with astore.transaction():`` runs the block's calls on one thread (where the store's
transaction is open) for the life of the block — one of a few kept for transactions, never
one started per block — found again through a context variable and the task's identity;
calls of other tasks go to the shared workers — their reads see committed data, their writes
wait for the block's lock there, never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

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

#: Worker threads an AsyncPodStore runs calls on (besides its transaction threads). Each
#: keeps a connection of its own; SQLite lets readers run beside the one writer.
DEFAULT_WORKERS = 4

#: Threads that host an AsyncPodStore's transactions, each one block at a time, started as
#: needed and kept: starting a thread per block from the loop's thread stalled the loop (200
#: blocks entered at once: 0.35 s). SQLite lets one write transaction be open, so more threads
#: would only wait for its lock; at least two, so that a block awaiting another task's block
#: lets that one wait out the busy timeout rather than wait for a thread for ever.
TRANSACTION_THREADS = 4

# The transactions open in this context: the task that opened one finds it again here.
_OPEN: contextvars.ContextVar[tuple[_Transaction, ...]] = contextvars.ContextVar(
    "podstore_async_transactions", default=()
)


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


class AsyncPodStore:
    """A PodStore for asyncio: the same methods as coroutines, each run in a worker thread.

    Open with ``await AsyncPodStore.open(path, ...)`` (PodStore.open's arguments) or wrap an
    open store with ``AsyncPodStore(store)``; ``await astore.close()`` or ``async with``.
    ``astore.transaction()`` is an async context manager owned by the task that enters it.
    """

    def __init__(self, store: PodStore, *, workers: int = DEFAULT_WORKERS) -> None:
        self.sync = store
        self._workers = _executor(workers)
        self._worker_count = workers
        self._tx_threads = _TransactionThreads.of(self)
        # The options the store was opened with are its sessions' (no public accessor).
        self._busy_timeout = store._sessions.options.busy_timeout
        _LIVE.add(self)
        # The whole-file calls' process, started on the first call that goes there.
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
        """Stop the worker process (after the call it runs, if any), close the store (in a
        worker) and stop the worker threads. Calls made after it raise PodStoreError."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                await self._in_pool(self._process.close)
            finally:
                await self._in_pool(self.sync.close)
        finally:
            self._workers.shutdown(wait=False)
            self._tx_threads.close()

    async def __aenter__(self) -> AsyncPodStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- running calls ---------------------------------------------------------------------

    async def _call(
        self,
        fn: Callable[[], R],
        method: Callable[..., Any] | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> R:
        """Run ``fn`` on the calling task's open transaction, if it has one here (it must
        join it); else ``method(*args, **kwargs)`` in the worker process if it is a
        whole-file call that pays off there (aio_process.py); else on a shared worker."""
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
        """In a worker thread: choose (stat the file, pickle the arguments), then run ``fn``
        here or send the call to the worker process and wait for its answer."""
        request = aio_process.process_request(name, self.sync.path, args, kwargs)
        if request is None:
            return fn()
        result: R = self._process.call(name, request)
        return result

    async def _pool(self, fn: Callable[[], R]) -> R:
        if self._closed:
            raise PodStoreError("the store is closed")
        return await self._in_pool(fn)

    async def _release(self, close: Callable[[], None]) -> None:
        """Close a stream or reader; nothing to do once the store is closed (that closed it)."""
        if not self._closed:
            await self._in_pool(close)

    async def _in_pool(self, fn: Callable[[], R]) -> R:
        return await _outcome(self._workers.submit(fn))

    def transaction(self) -> _Transaction:
        """``async with astore.transaction():`` — the calls the entering task makes inside the
        block form one atomic commit, rolled back as a whole on an exception (or
        cancellation). Blocks nest (savepoints). Other tasks' calls never join it: their
        reads see committed data, their writes wait (in a worker, up to busy_timeout) for the
        block to end."""
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
        """``await astore.call(fn, ...)``: ``fn(store, ...)`` in a worker — any PodStore method
        (``PodStore.history``, or one added later) or a function of the store; inside the
        task's transaction it runs there."""
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


# Stores whose worker threads a forked child must replace: the child has none of them, while
# the executor believes its idle threads are there (a submitted call would wait for ever).
_LIVE: weakref.WeakSet[AsyncPodStore] = weakref.WeakSet()


def _executor(workers: int) -> ThreadPoolExecutor:
    # podstore's own threads block catchable signals, so the kernel hands a signal to the main
    # thread, where podstore holds it off while a commit changes state (sqlite/signals.py).
    return ThreadPoolExecutor(workers, "podstore", initializer=signals.keep_out)


def _new_workers_in_child() -> None:
    for astore in list(_LIVE):
        astore._workers = _executor(astore._worker_count)
        astore._tx_threads = _TransactionThreads.of(astore)


os.register_at_fork(after_in_child=_new_workers_in_child)


def _owned(astore: AsyncPodStore) -> _Transaction | None:
    """The innermost transaction of ``astore`` the current task opened, if any."""
    task = asyncio.current_task()
    for tx in reversed(_OPEN.get()):
        if tx.astore is astore and tx.owner is task and tx.active:
            return tx
    return None


class _BlockCalls:
    """One block's calls, run in order by the transaction thread that serves the block from
    its BEGIN to its end (``end()``)."""

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
    """Up to TRANSACTION_THREADS long-lived threads, each serving one block's calls at a time;
    a block that finds none free waits in line (no thread is started for it). Daemon threads:
    one waiting on a block its task abandoned must not hold up the interpreter's exit."""

    def __init__(self) -> None:
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

    @classmethod
    def of(cls, astore: AsyncPodStore) -> _TransactionThreads:
        """The threads of ``astore``: they end with it, closed or collected (as a
        ThreadPoolExecutor's do)."""
        threads = cls()
        weakref.finalize(astore, threads.close)
        return threads

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
            # Not cancelled before it started (an interrupt raised on the loop, or BEGIN
            # failed): once it is done, undo what it did (the thread runs calls in order).
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
        # The commit (or rollback) is queued behind any call of the block still running in
        # its thread. A cancellation before it starts turns it into a rollback (and is
        # raised); once it has started it runs to its end, and its outcome is the caller's.
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
    """BEGIN on a transaction thread, unless the block waited for one past the busy timeout:
    all that time, the store's other blocks held the write lock or waited for it."""
    if time.monotonic() - queued > busy_timeout:
        raise StoreBusyError(
            f"no transaction thread came free within busy_timeout ({busy_timeout:g} s): "
            "the store's other transaction() blocks held the write lock or waited for it"
        )
    return block.__enter__()


async def _outcome(
    work: concurrent.futures.Future[R], cancel: Callable[[], bool] | None = None
) -> R:
    """The outcome of ``work`` (queued in a worker thread), cancellation included: either the
    cancellation wins — ``work`` had not started and never runs (or ``cancel()`` turned it
    into a rollback) — and CancelledError is raised after it ended; or ``work`` had started,
    runs to its end, and the caller gets its result or its error, as if not cancelled (the
    cancellation is withdrawn: ``Task.uncancel``). Never CancelledError for a call that
    committed (docs/api.md, "Interrupts, SIGTERM and cancellation")."""
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
    import contextlib

    with contextlib.suppress(Exception):
        block.__exit__(asyncio.CancelledError, asyncio.CancelledError(), None)


class AsyncRowStream(Generic[T]):
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

    async def aclose(self) -> None:
        self._done, self._page = True, []
        await self._astore._release(self._rows.close)

    async def __aenter__(self) -> AsyncRowStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncReader:
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

    async def __aenter__(self) -> AsyncReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
