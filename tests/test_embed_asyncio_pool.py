"""AsyncPodStore's transaction threads (docs/api.md, "asyncio"; issue: 200 tasks entering
``transaction()`` at once stalled the loop 0.35 s, a thread started per block from the loop's
thread).

Structural, not timed: the threads 200 blocks start and run on are counted; a block that
awaits another task's block still lets it end (StoreBusyError, not a wait for a thread for
ever); blocks that wait in line for a thread past busy_timeout fail then, not a turn later.
The loop-stall figures themselves are the bench's (``python -m bench --only loopstall``).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from podstore import AsyncPodStore, PodStore, PodStoreError, StoreBusyError, aio

RES = "vendor.com/gpu"
TASKS = 200


def test_200_blocks_at_once_start_and_run_on_a_few_threads(db_path: Path) -> None:
    async def main() -> tuple[set[threading.Thread], int, int]:
        async with await AsyncPodStore.open(db_path) as astore:
            await astore.insert("before", "c", RES, None, b"")
            before = set(threading.enumerate())
            seen: set[threading.Thread] = set()
            ran_on: set[threading.Thread] = set()
            stop = False

            async def watch() -> None:
                while not stop:
                    seen.update(threading.enumerate())
                    await asyncio.sleep(0)

            async def one(i: int) -> None:
                async with astore.transaction():
                    await astore.insert(f"p{i}", "c", RES, None, b"")
                    ran_on.add(await astore.call(lambda s: threading.current_thread()))

            watcher = asyncio.create_task(watch())
            await asyncio.gather(*(one(i) for i in range(TASKS)))
            stop = True
            await watcher
            seen.update(threading.enumerate())
            return ran_on, len(seen - before), len(await astore.pods())

    ran_on, started, pods = asyncio.run(main())
    assert pods == TASKS + 1
    # Threads are kept (a thread object per block would be TASKS of them) and few are started.
    assert len(ran_on) <= aio.TRANSACTION_THREADS, len(ran_on)
    assert started <= aio.TRANSACTION_THREADS, started


def test_a_block_awaiting_another_tasks_block_lets_it_time_out(db_path: Path) -> None:
    """Every thread but the waiting block's taken by blocks in line for the lock it holds."""

    async def main() -> list[str]:
        async with await AsyncPodStore.open(db_path, busy_timeout=0.5) as astore:

            async def other(i: int) -> str:
                try:
                    async with astore.transaction():
                        await astore.insert(f"other-{i}", "c", RES, None, b"")
                except StoreBusyError:
                    return "busy"
                return "committed"

            async with astore.transaction():
                await astore.insert("holder", "c", RES, None, b"")
                outcomes = await asyncio.wait_for(
                    asyncio.gather(*(other(i) for i in range(2 * aio.TRANSACTION_THREADS))), 30
                )
            return outcomes

    assert asyncio.run(main()) == ["busy"] * (2 * aio.TRANSACTION_THREADS)


def test_blocks_in_line_for_a_thread_past_busy_timeout_fail_then(db_path: Path) -> None:
    """Six threads' worth of blocks wait for a lock held past busy_timeout: each fails
    within two busy timeouts (one in line for a thread, one for the lock) — not a busy
    timeout per round of threads (six)."""
    busy_timeout = 1.0
    in_line = 6
    blocks = in_line * aio.TRANSACTION_THREADS

    async def main() -> tuple[list[str], float]:
        async with await AsyncPodStore.open(db_path, busy_timeout=busy_timeout) as astore:
            await astore.insert("before", "c", RES, None, b"")
            raw = sqlite3.connect(db_path, isolation_level=None)
            raw.execute("BEGIN IMMEDIATE")  # held until every block gave up

            async def block(i: int) -> str:
                try:
                    async with astore.transaction():
                        await astore.insert(f"p{i}", "c", RES, None, b"")
                except StoreBusyError:
                    return "busy"
                return "committed"

            t0 = time.monotonic()
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(block(i) for i in range(blocks))), 60
            )
            elapsed = time.monotonic() - t0
            raw.execute("ROLLBACK")
            raw.close()
            return outcomes, elapsed

    outcomes, elapsed = asyncio.run(main())
    assert outcomes == ["busy"] * blocks
    # A round per busy timeout would take six; 1.5 s of slack for a loaded machine.
    assert elapsed < 2 * busy_timeout + 1.5, elapsed


def test_close_ends_the_transaction_threads_and_refuses_new_blocks(db_path: Path) -> None:
    async def main() -> tuple[list[threading.Thread], AsyncPodStore]:
        before = set(threading.enumerate())
        astore = await AsyncPodStore.open(db_path)

        async def one(i: int) -> None:
            async with astore.transaction():
                await astore.insert(f"p{i}", "c", RES, None, b"")

        await asyncio.gather(*(one(i) for i in range(20)))
        started = [t for t in threading.enumerate() if t not in before]
        await astore.close()
        return started, astore

    started, astore = asyncio.run(main())
    tx_threads = [t for t in started if t.name == "podstore-tx"]
    assert tx_threads
    for t in tx_threads:
        t.join(10)
        assert not t.is_alive(), t

    async def after_close() -> None:
        async with astore.transaction():
            pass

    with pytest.raises(PodStoreError, match="closed"):
        asyncio.run(after_close())


def test_a_store_dropped_without_close_ends_its_transaction_threads(db_path: Path) -> None:
    store = PodStore.open(db_path)

    async def main() -> list[threading.Thread]:
        before = set(threading.enumerate())
        astore = AsyncPodStore(store)
        async with astore.transaction():
            await astore.insert("p", "c", RES, None, b"")
        return [t for t in threading.enumerate() if t not in before and t.name == "podstore-tx"]

    tx_threads = asyncio.run(main())
    gc.collect()
    assert tx_threads
    for t in tx_threads:
        t.join(10)
        assert not t.is_alive(), t
    store.close()


def _blocked_signals() -> int:
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))


def test_the_worker_and_transaction_threads_block_catchable_signals(db_path: Path) -> None:
    """The kernel may hand a process signal to any thread that does not block it, and Python
    then runs the handler in the main thread at once, inside the steps podstore holds signals
    off for; so podstore's own threads block them (read from the kernel's view of each thread,
    /proc/self/task/TID/status)."""

    async def main() -> tuple[int, int]:
        async with await AsyncPodStore.open(db_path) as astore:
            worker = await astore.call(lambda _store: _blocked_signals())
            async with astore.transaction():
                # Inside the task's block, a call runs on the block's transaction thread.
                block = await astore.call(lambda _store: _blocked_signals())
                await astore.insert("p", "c", RES, None, b"")
            return worker, block

    worker, block = asyncio.run(main())
    for mask in (worker, block):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP):
            assert mask & (1 << (sig - 1)), (sig, hex(mask))
    # The test's own (main) thread blocks none of them: the mask is the threads' own.
    assert not _blocked_signals() & (1 << (signal.SIGINT - 1))
