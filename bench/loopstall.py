"""The event loop under AsyncPodStore (docs/performance.md, "asyncio: the event loop").

A ticker task sleeps 5 ms at a time; how late each wake-up comes is how long the loop was
stalled (worst and p99 over the ticks of all rounds, pooled). Two loads, each beside what a
user would write instead, in the same run:

- *transactions*: 200 tasks enter ``async with astore.transaction():`` at once, one insert
  each; against ``asyncio.to_thread`` running a plain sqlite3 ``BEGIN IMMEDIATE`` … ``COMMIT``
  per task (the default executor's threads, one connection per thread). Also the threads the
  200 blocks started. Target (issue 34): worst stall ≤ 50 ms.
- *import*: ``import_checkpoint`` of an 8 MB checkpoint as AsyncPodStore routes it (to its
  worker process) against the same call kept in a worker thread (``astore.call`` of a
  function: never routed). Target (issue 31): worst stall ≤ 50 ms.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.measure import percentile
from bench.sections import RunContext, Section, register

TICK = 0.005
TASKS = 200
IMPORT_PODS = 6_300  # about 8 MB of checkpoint
TARGET_S = 0.050


async def _stalls(work: Callable[[], Awaitable[object]]) -> tuple[list[float], float]:
    """How late each wake-up of a 5 ms ticker came (s) while ``work()`` ran, and its wall
    time."""
    late: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t0 = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - t0 - TICK)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    late.clear()
    t0 = time.perf_counter()
    await work()
    wall = time.perf_counter() - t0
    stop = True
    await tick
    return late, wall


def _summary(runs: list[tuple[list[float], float]]) -> dict[str, float]:
    """Worst and p99 lateness (ms) over the ticks of every round, pooled."""
    late = sorted(x for ticks, _ in runs for x in ticks)
    return {
        "worst_ms": late[-1] * 1e3,
        "p99_ms": percentile(late, 99) * 1e3,
        "ticks": len(late),
        "rounds": len(runs),
        "wall_s": sum(wall for _, wall in runs) / len(runs),
    }


def _started_threads(work: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[int]]:
    async def counted() -> int:
        before = {t.ident for t in threading.enumerate()}
        peak: set[int | None] = set()

        async def watch() -> None:
            while True:
                peak.update(t.ident for t in threading.enumerate())
                await asyncio.sleep(0.001)

        w = asyncio.create_task(watch())
        await work()
        peak.update(t.ident for t in threading.enumerate())
        w.cancel()
        return len(peak - before)

    return counted


def _transactions(db: str, raw_db: str, tasks: int, rounds: int) -> dict[str, Any]:
    from podstore import AsyncPodStore

    async def main() -> dict[str, Any]:
        async with await AsyncPodStore.open(db) as astore:
            await astore.insert("warm", "main", "nvidia.com/gpu", {0: ["GPU-0"]}, b"")
            serial = itertools.count()

            async def podstore() -> None:
                async def one() -> None:
                    uid = f"p{next(serial)}"
                    async with astore.transaction():
                        await astore.insert(uid, "main", "nvidia.com/gpu", {0: ["G"]}, b"")

                await asyncio.gather(*(one() for _ in range(tasks)))

            local = threading.local()

            def raw_one() -> None:
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = sqlite3.connect(raw_db, timeout=10, isolation_level=None)
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t VALUES (?, ?)", (f"r{next(serial)}", "x" * 100))
                conn.execute("COMMIT")

            async def baseline() -> None:
                await asyncio.gather(*(asyncio.to_thread(raw_one) for _ in range(tasks)))

            # A fresh store's first round: the threads the blocks start (also the warm-up).
            threads = await _started_threads(podstore)()
            runs: dict[str, list[tuple[list[float], float]]] = {"podstore": [], "to_thread": []}
            for _ in range(rounds):  # alternating, so that drifting load moves both
                runs["podstore"].append(await _stalls(podstore))
                runs["to_thread"].append(await _stalls(baseline))
            out = {name: _summary(got) for name, got in runs.items()}
            out["podstore"]["threads_started"] = threads
        return out

    with sqlite3.connect(raw_db) as raw:
        raw.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT)")
    return asyncio.run(main())


def _import(d: str, pods: int, rounds: int) -> dict[str, Any]:
    from bench.workload import generate
    from podstore import AsyncPodStore, PodStore
    from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file

    w = generate(pods, 7)
    ckpt = os.path.join(d, "kubelet_internal_checkpoint")
    write_checkpoint_file(ckpt, dumps_checkpoint([a.entry() for a in w.allocations], w.registered))

    def in_thread(store: PodStore, path: str) -> None:
        store.import_checkpoint(path)

    async def main() -> dict[str, Any]:
        runs: dict[str, list[tuple[list[float], float]]] = {"process": [], "thread": []}
        async with await AsyncPodStore.open(os.path.join(d, "import.db")) as astore:
            for _ in range(rounds):
                runs["process"].append(await _stalls(lambda: astore.import_checkpoint(ckpt)))
                runs["thread"].append(await _stalls(lambda: astore.call(in_thread, ckpt)))
        return {name: _summary(got) for name, got in runs.items()}

    out = asyncio.run(main())
    out["checkpoint_bytes"] = os.path.getsize(ckpt)
    return out


def run(ctx: RunContext) -> dict[str, Any]:
    d = os.path.join(ctx.workdir, "loopstall")
    os.makedirs(d, exist_ok=True)
    smoke = ctx.cfg.smoke
    tasks = 20 if smoke else TASKS
    out: dict[str, Any] = {
        "tasks": tasks,
        "transactions": _transactions(
            os.path.join(d, "tx.db"), os.path.join(d, "raw.db"), tasks, 2 if smoke else 10
        ),
        "import": _import(d, 200 if smoke else IMPORT_PODS, 2 if smoke else 3),
    }
    shutil.rmtree(d, ignore_errors=True)
    ctx.log(f"  loopstall: {tasks} transactions, import of {out['import']['checkpoint_bytes']} B")
    return out


def markdown(results: dict[str, Any]) -> str:
    tx, imp = results["transactions"], results["import"]
    lines = [
        "",
        "## asyncio: the event loop (5 ms ticker; worst and p99 lateness, all rounds' ticks)",
        "",
        "| load | podstore | what a user would write instead |",
        "|---|---|---|",
        f"| {results['tasks']} tasks enter `transaction()` at once "
        f"({tx['podstore']['rounds']} rounds) | worst "
        f"{tx['podstore']['worst_ms']:.1f} ms, p99 {tx['podstore']['p99_ms']:.1f} ms, "
        f"{tx['podstore']['threads_started']} threads started | `asyncio.to_thread` + sqlite3: "
        f"worst {tx['to_thread']['worst_ms']:.1f} ms, p99 {tx['to_thread']['p99_ms']:.1f} ms |",
        f"| import of a {imp['checkpoint_bytes'] / 1e6:.1f} MB checkpoint "
        f"({imp['process']['rounds']} rounds) | worker process: "
        f"worst {imp['process']['worst_ms']:.1f} ms, p99 {imp['process']['p99_ms']:.1f} ms | "
        f"worker thread: worst {imp['thread']['worst_ms']:.1f} ms, p99 "
        f"{imp['thread']['p99_ms']:.1f} ms |",
        "",
        "Targets:",
        "",
    ]
    for label, worst in (
        ("200 transactions: worst stall", tx["podstore"]["worst_ms"]),
        ("8 MB import: worst stall", imp["process"]["worst_ms"]),
    ):
        verdict = "PASS" if worst <= TARGET_S * 1e3 else "MISS"
        lines.append(f"- {label} ≤ 50 ms: {worst:.1f} ms — {verdict}")
    return "\n".join([*lines, ""])


register(Section("loopstall", "asyncio event-loop stalls: 200 transactions, 8 MB import", run,
                 render=markdown))  # fmt: skip
