"""A cancellation at each await of AsyncPodStore, placed there on purpose rather than by timing
(docs/api.md, "Interrupts, SIGTERM and cancellation"; tests/test_embed_cancel.py sweeps the
same by time).

Each await hands work to a thread and waits for it; the cancellation can find that work
queued, running, or done with the task not yet resumed. Each state is made to hold while
``task.cancel()`` is called: *queued* behind a call of the same thread that waits on a gate,
*running* while the call waits for a write lock a plain sqlite3 connection holds (seen in the
thread's stack), *done* by holding the event loop — so the task cannot resume — until the
effect is visible to another connection. Whatever the state, the outcome must be one of two:
CancelledError and nothing committed, or the call completed, the caller sees it complete and
the write is in the store; the expected one of the two is asserted for each state.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from podstore import AsyncPodStore, PodStore, aio

RES = "vendor.com/gpu"
LIMIT = 20.0  # seconds: a hard bound on every wait, so that a regression fails, not hangs


def _present(db_path: Path, uid: str) -> bool:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as raw:
        return raw.execute("SELECT 1 FROM pods WHERE uid = ?", (uid,)).fetchone() is not None


def _hold_loop_until(done: Callable[[], bool]) -> None:
    """Block the event loop's thread (on purpose) until ``done()``: no task resumes meanwhile."""
    deadline = time.monotonic() + LIMIT
    while not done():
        assert time.monotonic() < deadline, "the worker never got there"
        time.sleep(0.001)


def _in_sqlite_layer(names: str = "podstore_", function: str | None = None) -> int:
    """Threads named ``names…`` now inside podstore's SQLite layer (waiting for a lock); with
    ``function``, inside that function of it: ``retry_busy`` is the BEGIN IMMEDIATE itself,
    where a thread on its way there (its process's turn to write) is not yet."""
    frames = sys._current_frames()
    count = 0
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if not thread.name.startswith(names):
            continue
        while frame is not None:
            code = frame.f_code
            if "/podstore/sqlite/" in code.co_filename and function in (None, code.co_name):
                count += 1
                break
            frame = frame.f_back
    return count


async def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIMIT
    while not done():
        assert time.monotonic() < deadline, "the worker never got there"
        await asyncio.sleep(0.002)


@contextmanager
def _write_lock(db_path: Path) -> Iterator[Callable[[], None]]:
    """Another connection holds the write lock until the returned function is called."""
    raw = sqlite3.connect(db_path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            raw.execute("COMMIT")
            released = True

    try:
        yield release
    finally:
        release()
        raw.close()


def _locked(db_path: Path) -> bool:
    """Whether some connection holds the store's write lock now."""
    raw = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    try:
        raw.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        raw.close()
    return False


class Gate:
    """A call that keeps its worker thread busy until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, store: PodStore) -> None:
        self.entered.set()
        assert self.opened.wait(LIMIT)


def _occupy(astore: AsyncPodStore, gate: Gate) -> Coroutine[Any, Any, None]:
    """Start ``gate`` on the calling task's thread (the block's, inside a transaction) and
    come back at once, leaving it running there: the next call of the block queues behind."""
    call = astore.call(gate)
    call.send(None)  # runs up to the await of the submitted call
    return call


async def _outcome(db_path: Path, task: asyncio.Task[Any], uid: str) -> str:
    try:
        await asyncio.wait_for(task, LIMIT)
    except asyncio.CancelledError:
        assert not _present(db_path, uid), "CancelledError, yet the write committed"
        return "cancelled"
    assert _present(db_path, uid), "completed, yet the write is not in the store"
    return "completed"


async def _deliver(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and let it take the cancellation where it waits."""
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)


def _run(db_path: Path, case: Callable[[AsyncPodStore], Awaitable[str]], workers: int = 4) -> str:
    async def main() -> str:
        async with await AsyncPodStore.open(db_path, workers=workers) as astore:
            await astore.insert("before", "c", RES, None, b"")
            return await case(astore)

    return asyncio.run(main())


# ---- a call outside any block --------------------------------------------------------------


def test_cancelled_while_queued_for_a_worker_it_never_runs(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        gate = Gate()
        busy = asyncio.create_task(astore.call(gate))  # the only worker
        await asyncio.sleep(0.01)
        task = asyncio.create_task(astore.insert("p", "c", RES, None, b""))
        await asyncio.sleep(0)
        await _deliver(task)
        gate.opened.set()
        await busy
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case, workers=1) == "cancelled"


def test_cancelled_while_running_it_completes_and_says_so(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        with _write_lock(db_path) as release:
            task = asyncio.create_task(astore.insert("p", "c", RES, None, b""))
            await _until(lambda: _in_sqlite_layer(function="retry_busy") == 1)  # in the BEGIN
            await _deliver(task)
            release()
            return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "completed"


def test_cancelled_after_it_committed_it_completes_and_says_so(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        task = asyncio.create_task(astore.insert("p", "c", RES, None, b""))
        await asyncio.sleep(0)
        _hold_loop_until(lambda: _present(db_path, "p"))
        await _deliver(task)
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "completed"


# ---- async with transaction() ----------------------------------------------------------------


def _nothing() -> Awaitable[None]:
    return asyncio.sleep(0)


async def _block(astore: AsyncPodStore, uid: str, inside: Callable[[], Awaitable[object]]) -> None:
    async with astore.transaction():
        await inside()
        await astore.insert(uid, "c", RES, None, b"")


def test_cancelled_while_begin_waits_for_a_thread_the_block_never_runs(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        with _write_lock(db_path) as release:
            # Every transaction thread busy with a block waiting for the lock.
            others = [
                asyncio.create_task(_block(astore, f"other-{i}", _nothing))
                for i in range(aio.TRANSACTION_THREADS)
            ]
            await _until(lambda: _in_sqlite_layer("podstore-tx") == aio.TRANSACTION_THREADS)
            task = asyncio.create_task(_block(astore, "p", _nothing))
            await asyncio.sleep(0)
            await _deliver(task)
            release()
            await asyncio.gather(*others)
            return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "cancelled"


def test_cancelled_while_begin_waits_for_the_lock_the_block_runs_and_commits(
    db_path: Path,
) -> None:
    async def case(astore: AsyncPodStore) -> str:
        with _write_lock(db_path) as release:
            task = asyncio.create_task(_block(astore, "p", _nothing))
            # In the BEGIN, waiting for the lock: a cancellation before it ran is one the
            # block never ran (the test above).
            await _until(lambda: _in_sqlite_layer("podstore-tx", "retry_busy") == 1)
            await _deliver(task)
            release()
            return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "completed"


def test_cancelled_after_begin_the_block_runs_and_commits(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        task = asyncio.create_task(_block(astore, "p", _nothing))
        await asyncio.sleep(0)
        _hold_loop_until(lambda: _locked(db_path))  # BEGIN done; the task not resumed
        await _deliver(task)
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "completed"


def test_cancelled_while_a_call_of_the_block_is_queued_it_rolls_back(db_path: Path) -> None:
    gate = Gate()

    async def case(astore: AsyncPodStore) -> str:
        started = asyncio.Event()

        async def inside() -> None:
            occupied = _occupy(astore, gate)
            started.set()
            try:
                await astore.insert("first", "c", RES, None, b"")  # queued behind the gate
            finally:
                occupied.close()

        task = asyncio.create_task(_block(astore, "p", inside))
        await started.wait()
        await _deliver(task)
        gate.opened.set()
        outcome = await _outcome(db_path, task, "p")
        assert not _present(db_path, "first")
        return outcome

    assert _run(db_path, case) == "cancelled"


def test_cancelled_while_a_call_of_the_block_runs_it_completes_and_commits(
    db_path: Path,
) -> None:
    gate = Gate()

    def insert_then_wait(store: PodStore) -> None:
        store.insert("first", "c", RES, None, b"")
        gate(store)

    async def case(astore: AsyncPodStore) -> str:
        started = asyncio.Event()

        async def inside() -> None:
            started.set()
            await astore.call(insert_then_wait)

        task = asyncio.create_task(_block(astore, "p", inside))
        await started.wait()
        await _until(gate.entered.is_set)
        await _deliver(task)
        gate.opened.set()
        outcome = await _outcome(db_path, task, "p")
        assert _present(db_path, "first")
        return outcome

    assert _run(db_path, case) == "completed"


def test_cancelled_while_a_nested_begin_is_queued_the_block_rolls_back(db_path: Path) -> None:
    gate = Gate()

    async def case(astore: AsyncPodStore) -> str:
        started = asyncio.Event()

        async def inside() -> None:
            occupied = _occupy(astore, gate)
            started.set()
            try:
                async with astore.transaction():  # its SAVEPOINT queued behind the gate
                    await astore.insert("nested", "c", RES, None, b"")
            finally:
                occupied.close()

        task = asyncio.create_task(_block(astore, "p", inside))
        await started.wait()
        await _deliver(task)
        gate.opened.set()
        outcome = await _outcome(db_path, task, "p")
        assert not _present(db_path, "nested")
        return outcome

    assert _run(db_path, case) == "cancelled"


def test_cancelled_while_the_commit_is_queued_it_rolls_back(db_path: Path) -> None:
    """The commit waits behind a call of the block still running on its thread; the
    cancellation comes first, so the block rolls back and CancelledError is raised."""
    gate = Gate()

    async def case(astore: AsyncPodStore) -> str:
        exiting = asyncio.Event()

        async def block() -> None:
            async with astore.transaction():
                await astore.insert("p", "c", RES, None, b"")
                _occupy(astore, gate)
                exiting.set()

        task = asyncio.create_task(block())
        await exiting.wait()  # the block has queued its commit behind the gate
        await _deliver(task)
        gate.opened.set()
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "cancelled"


def test_cancelled_after_the_commit_the_block_completes(db_path: Path) -> None:
    async def case(astore: AsyncPodStore) -> str:
        exiting = asyncio.Event()

        async def block() -> None:
            async with astore.transaction():
                await astore.insert("p", "c", RES, None, b"")
                exiting.set()

        task = asyncio.create_task(block())
        await exiting.wait()  # the block has queued its commit
        _hold_loop_until(lambda: _present(db_path, "p"))  # committed; the task not resumed
        await _deliver(task)
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "completed"


def test_a_failed_block_cancelled_while_its_rollback_is_queued_rolls_back(db_path: Path) -> None:
    """The block's own error and a cancellation while its rollback is queued: rolled back,
    and the caller gets CancelledError."""
    gate = Gate()

    async def case(astore: AsyncPodStore) -> str:
        exiting = asyncio.Event()

        async def block() -> None:
            async with astore.transaction():
                await astore.insert("p", "c", RES, None, b"")
                _occupy(astore, gate)
                exiting.set()
                raise ValueError("the block failed")

        task = asyncio.create_task(block())
        await exiting.wait()
        await _deliver(task)
        gate.opened.set()
        return await _outcome(db_path, task, "p")

    assert _run(db_path, case) == "cancelled"
