"""A loop-lag probe: the longest the asyncio event loop was blocked while an awaitable ran
(tests/test_embed_asyncio.py, tests/test_embed_async_process.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

#: The probe's sleep: short, so that a stall shows as lateness, not hidden in a long sleep.
TICK = 0.002


async def worst_lag(work: Awaitable[T]) -> tuple[float, T]:
    """Await ``work`` beside a task that sleeps ``TICK`` at a time; returns the probe's worst
    lateness (the longest stall of the loop) and ``work``'s result."""
    stop = False
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        while not stop:
            t0 = time.perf_counter()
            await asyncio.sleep(TICK)
            worst = max(worst, time.perf_counter() - t0 - TICK)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    try:
        result = await work
    finally:
        stop = True
        await task
    return worst, result
