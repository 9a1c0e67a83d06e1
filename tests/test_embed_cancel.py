"""A cancelled AsyncPodStore call either lost (rolled back, CancelledError) or completed (its
result returned): never CancelledError for a write that committed (docs/api.md,
"Interrupts, SIGTERM and cancellation").

The cancellation is sent after 0 to 4 turns of the loop, then 0.2 ms later each time, so that
it falls at each await of the call in turn (queued for a worker, running there, committing);
wherever it falls, the outcome the caller sees must match what the store holds.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from harness.forks import figures

from podstore import AsyncPodStore

RES = "vendor.com/gpu"


def _present(db_path: Path, uid: str) -> bool:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as raw:
        return raw.execute("SELECT 1 FROM pods WHERE uid = ?", (uid,)).fetchone() is not None


async def _sweep(
    db_path: Path, call: Callable[[str], Coroutine[Any, Any, object]], name: str
) -> dict[str, int]:
    counts = {"cancelled": 0, "completed": 0, "faked": 0, "lost": 0}
    finished_first = 0
    turns = 0
    while finished_first < 5 and turns < 400:
        uid = f"{name}-{turns}"
        task = asyncio.create_task(call(uid))
        for _ in range(min(turns, 4)):
            await asyncio.sleep(0)
        if turns > 4:  # then later and later, into the worker's run and its commit
            await asyncio.sleep((turns - 4) * 0.0002)
        if task.done():
            finished_first += 1
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            counts["cancelled"] += 1
            counts["faked"] += _present(db_path, uid)
        else:
            counts["completed"] += 1
            counts["lost"] += not _present(db_path, uid)
        turns += 1
    return counts


def test_a_cancelled_call_or_commit_is_rolled_back_or_seen_completed(db_path: Path) -> None:
    async def main() -> dict[str, dict[str, int]]:
        async with await AsyncPodStore.open(db_path) as astore:

            async def insert(uid: str) -> None:
                await astore.insert(uid, "c", RES, {0: ["d"]}, b"")

            async def block(uid: str) -> None:
                async with astore.transaction():
                    await astore.insert(uid, "c", RES, None, b"")

            return {
                "insert": await _sweep(db_path, insert, "insert"),
                "transaction": await _sweep(db_path, block, "transaction"),
            }

    results = asyncio.run(main())
    figures("cancellation", **results)
    for name, counts in results.items():
        assert counts["faked"] == 0 and counts["lost"] == 0, (name, counts)
        assert counts["cancelled"] > 0 and counts["completed"] > 0, (name, counts)
