"""A fork from a plain thread while AsyncPodStore transactions run (docs/api.md, "Threads,
processes and fork"): the loop keeps running while the fork waits for the blocks, the parent
gets no StoreBusyError, and a child using the inherited AsyncPodStore answers (hard timeout).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from harness.forks import figures, in_child

from podstore import AsyncPodStore

RES = "vendor.com/gpu"


def test_fork_from_a_thread_while_async_transactions_run(db_path: Path) -> None:
    async def main() -> dict[str, Any]:
        astore = await AsyncPodStore.open(db_path, busy_timeout=5)
        await astore.insert("before", "c", RES, None, b"")
        worst = 0.0
        stop = False

        async def ticker() -> None:
            nonlocal worst
            while not stop:
                t0 = time.perf_counter()
                await asyncio.sleep(0.005)
                worst = max(worst, time.perf_counter() - t0 - 0.005)

        async def writer(n: int) -> None:
            for i in range(6):
                async with astore.transaction():
                    await astore.insert(f"w{n}-{i}", "c", RES, None, b"")
                    await asyncio.sleep(0.02)  # the block needs the loop to go on

        def child() -> list[str]:
            async def use() -> list[str]:
                return sorted(await astore.pods())

            return asyncio.run(asyncio.wait_for(use(), 10))

        results: list[Any] = []
        forker = threading.Thread(target=lambda: results.append(in_child(child, timeout=20)))
        tick = asyncio.create_task(ticker())
        writers = [asyncio.create_task(writer(n)) for n in range(3)]
        await asyncio.sleep(0.03)
        forker.start()
        await asyncio.gather(*writers)
        await asyncio.to_thread(forker.join, 30)
        stop = True
        await tick
        pods = await astore.pods()
        await astore.close()
        return {"worst": worst, "child": results[0], "pods": len(pods)}

    out = asyncio.run(main())
    figures("fork-under-loop", worst_s=round(out["worst"], 4), child=str(out["child"])[:80])
    assert out["pods"] == 19  # every writer's block committed: no StoreBusyError
    assert "result" in out["child"], out["child"]
    assert "before" in out["child"]["result"]
    assert out["worst"] < 1.0, out  # not the busy timeout (5 s)
