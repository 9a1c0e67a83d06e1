"""``python -m bench.profiles``: where the time and memory of each missed write-path target go
(docs/performance.md, "Where the time goes"), written to ``bench/results/profiles.md``.

Not part of ``python -m bench`` (a profiler distorts the figures it would sit beside); run it
on the same tree after a whole bench run. Three profiles, each with its floor measured in the
same run:

1. **Insert CPU** at 1,000 pods, ``durability="normal"``: process CPU per insert + delete of
   podstore, of podstore's own recorded statements replayed on raw sqlite3 (its floor on
   SQLite: the same rows, none of podstore's Python), and of the lean store, interleaved; then
   cProfile of podstore's calls.
2. **Import** at 10,000 pods: ``import_checkpoint`` against the checksum-less load (json.loads
   + maps), the verified read alone (``read_checkpoint``) and the replay of every statement the
   import runs (raw executemany); then cProfile of the import.
3. **A follower at 100,000 entries**: the start-up sync and a one-entry sync
   (``PodStore.sync_checkpoint``, what ``podstore watch`` runs) against a re-import, cProfile
   of the one-entry sync, and tracemalloc's largest holders after the start-up sync with the
   process's VmHWM.
"""

from __future__ import annotations

import cProfile
import dataclasses
import gc
import io
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

from bench import rawsql, workload
from bench.kubelet import load_without_checksum
from bench.lean import LeanSqlite
from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint, read_checkpoint

SEED = 20240601
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "bench", "results", "profiles.md")
#: ``--quick``: small sizes, to try the script (its output is not the committed one).
QUICK = "--quick" in sys.argv[1:]


def _top(prof: cProfile.Profile, n: int = 18) -> str:
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.strip_dirs().sort_stats("tottime").print_stats(n)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    return "\n".join([total, "", *lines[start:]]).rstrip()


def _fence(text: str) -> str:
    return f"```\n{text}\n```"


def _cpu_loop(fns: dict[str, Callable[[int], None]], reps: int) -> dict[str, float]:
    """Mean process CPU per call of each, round-robin."""
    spent: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(reps):
        for name, fn in fns.items():
            c0 = time.process_time()
            fn(i)
            spent[name].append(time.process_time() - c0)
    return {k: statistics.fmean(v) for k, v in spent.items()}


def insert_cpu(tmp: str, pods: int = 1_000, reps: int = 1_500) -> str:
    w = workload.generate(pods, SEED)
    fresh = workload.fresh_allocations(reps, SEED + 2)
    db, raw_db, lean_db = (os.path.join(tmp, n) for n in ("ps.db", "raw.db", "lean.db"))
    with PodStore.open(db) as s:
        s.from_checkpoint_data(w.entries())
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            shutil.copyfile(db + suffix, raw_db + suffix)
    store = PodStore.open(db, durability="normal")
    # The statements of every insert and delete, recorded on a scratch copy (untimed).
    scratch = os.path.join(tmp, "scratch.db")
    shutil.copyfile(raw_db, scratch)
    rec_store = PodStore.open(scratch, durability="normal")
    recorded: list[list[rawsql.Call]] = []
    for a in fresh:
        calls, _ = rawsql.record(
            rec_store,
            lambda a=a: rec_store.insert(
                a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp
            ),
        )
        more, _ = rawsql.record(rec_store, lambda a=a: rec_store.delete([a.pod_uid]))
        recorded.append(calls + more)
    rec_store.close()
    raw = rawsql.RawSqlite(raw_db)
    raw.conn.execute("PRAGMA synchronous = NORMAL")
    lean = LeanSqlite(lean_db, synchronous="NORMAL")
    lean.load(w.entries())
    statements = statistics.fmean(len(c) for c in recorded)

    def ps(i: int) -> None:
        a = fresh[i]
        store.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
        store.delete([a.pod_uid])

    def rp(i: int) -> None:
        raw.replay(recorded[i])

    def ln(i: int) -> None:
        a = fresh[i]
        lean.insert(a)
        lean.delete(a.pod_uid)

    try:
        means = _cpu_loop({"podstore": ps, "replay": rp, "lean": ln}, reps)
        # The profile: the same calls again (inserted and deleted, so the store is as before).
        prof = cProfile.Profile()
        prof.enable()
        for i in range(reps):
            ps(i)
        prof.disable()
    finally:
        store.close()
        raw.close()
        lean.close()
    lines = [
        f"## 1. Insert + delete, {pods:,} pods, durability=normal ({reps:,} rounds)",
        "",
        "| contender | mean process CPU per insert + delete | vs lean |",
        "|---|---|---|",
    ]
    for name, label in (
        ("podstore", "podstore"),
        ("replay", f"podstore's statements replayed on raw sqlite3 ({statements:.0f} per round)"),
        ("lean", "lean sqlite3"),
    ):
        lines.append(
            f"| {label} | {means[name] * 1e6:.0f} µs | {means[name] / means['lean']:.2f}× |"
        )
    lines += ["", "cProfile of podstore's rounds (by own time):", "", _fence(_top(prof))]
    return "\n".join(lines)


def _median_time(fn: Callable[[], object], reps: int) -> float:
    out = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def import_profile(tmp: str, pods: int = 10_000, reps: int = 3) -> str:
    w = workload.generate(pods, SEED)
    entries = w.entries()
    ckpt = os.path.join(tmp, "kubelet_internal_checkpoint")
    with open(ckpt, "wb") as f:
        f.write(dumps_checkpoint(entries, w.registered))
    n = 0

    def fresh_db() -> str:
        nonlocal n
        n += 1
        path = os.path.join(tmp, f"imp{n}.db")
        PodStore.open(path).close()
        return path

    recorded_db = fresh_db()
    with PodStore.open(recorded_db) as s:
        calls = rawsql.recorded_bulk_rows(s, read_checkpoint(ckpt).entries)

    def ps() -> None:
        with PodStore.open(fresh_db()) as s:
            s.import_checkpoint(ckpt)

    def replay() -> None:
        rawsql.replay_load(fresh_db(), calls)

    # The same without the history: one event per imported entry, with its own text key.
    no_events = [c for c in calls if not c.sql.lstrip().startswith("INSERT INTO allocation_events")]

    def replay_no_events() -> None:
        rawsql.replay_load(fresh_db(), no_events)

    figures = {
        "podstore import_checkpoint": _median_time(ps, reps),
        "read_checkpoint alone (read, JSON decode, checksum, entries)": _median_time(
            lambda: read_checkpoint(ckpt), reps
        ),
        "replay of every statement the import runs, raw sqlite3": _median_time(replay, reps),
        "the same replay without the history events' inserts": _median_time(replay_no_events, reps),
        "checksum-less load (json.loads + maps)": _median_time(
            lambda: load_without_checksum(ckpt), reps
        ),
    }
    base = figures["checksum-less load (json.loads + maps)"]
    prof = cProfile.Profile()
    target = fresh_db()
    with PodStore.open(target) as s:
        prof.enable()
        s.import_checkpoint(ckpt)
        prof.disable()
    lines = [
        f"## 2. import_checkpoint, {pods:,} pods ({len(entries):,} entries; median of {reps})",
        "",
        "| step | wall | vs checksum-less load |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v * 1e3:.0f} ms | {v / base:.2f}× |" for k, v in figures.items()]
    lines += ["", "cProfile of one import (by own time):", "", _fence(_top(prof))]
    return "\n".join(lines)


def _changed(entries: list[PodDevicesEntry], i: int) -> list[PodDevicesEntry]:
    out = list(entries)
    k = len(out) // 2
    out[k] = dataclasses.replace(out[k], device_ids={0: [f"profile-moved-{i}"]})
    return out


def follower_profile(tmp: str, n: int = 100_000) -> str:
    w = workload.generate(n, SEED)
    entries = w.entries()[:n]
    cp = os.path.join(tmp, "kubelet_internal_checkpoint")
    with open(cp, "wb") as f:
        f.write(dumps_checkpoint(entries, w.registered))
    size = os.path.getsize(cp)
    db = os.path.join(tmp, "followed.db")
    with PodStore.open(db) as s:
        s.import_checkpoint(cp)
    changed = [dumps_checkpoint(_changed(entries, i), w.registered) for i in range(3)]
    gc.collect()
    store = PodStore.open(db)
    tracemalloc.start(8)
    t0 = time.perf_counter()
    store.sync_checkpoint(cp)  # the follower's start-up sync: every entry read, nothing written
    first = time.perf_counter() - t0
    snap = tracemalloc.take_snapshot()
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    holders = snap.statistics("lineno")[:12]
    syncs = []
    prof = cProfile.Profile()
    for i, data in enumerate(changed):
        with open(cp + ".tmp", "wb") as f:
            f.write(data)
        os.replace(cp + ".tmp", cp)
        if i == len(changed) - 1:
            prof.enable()
        t0 = time.perf_counter()
        store.sync_checkpoint(cp)
        syncs.append(time.perf_counter() - t0)
        if i == len(changed) - 1:
            prof.disable()
    store.close()
    # A re-import on a store one change behind, as the follower's was.
    behind = os.path.join(tmp, "behind")
    with open(behind, "wb") as f:
        f.write(changed[-2])
    reimport_db = os.path.join(tmp, "reimport.db")
    with PodStore.open(reimport_db) as s:
        s.import_checkpoint(behind)
        t0 = time.perf_counter()
        s.import_checkpoint(cp)
        reimport = time.perf_counter() - t0
    one = statistics.median(syncs)
    lines = [
        f"## 3. A follower at {n:,} entries ({size / 1e6:.1f} MB file)",
        "",
        f"- start-up sync (cache empty, nothing to write): {first:.2f} s (under tracemalloc)",
        f"- one-entry sync, median of {len(syncs)}: {one * 1e3:.0f} ms; re-import of the file: "
        f"{reimport:.2f} s, {reimport / one:.1f}× the sync",
        f"- Python objects at the peak of the start-up sync (tracemalloc): "
        f"{traced_peak / 2**20:.0f} MiB; the follower's own peak resident set, measured in a "
        "process of its own, is in latest.md (section watch)",
        "",
        "Largest holders of Python memory after the start-up sync (tracemalloc, by line):",
        "",
        "| size | blocks | where |",
        "|---|---|---|",
    ]
    for st in holders:
        frame = st.traceback[0]
        name = frame.filename
        if name.startswith(REPO + os.sep):
            name = os.path.relpath(name, REPO)
        elif "site-packages" in name:
            name = name.split("site-packages" + os.sep, 1)[1]
        else:
            name = os.path.basename(name)
        where = f"{name}:{frame.lineno}"
        lines.append(f"| {st.size / 2**20:.1f} MiB | {st.count:,} | `{where}` |")
    lines += ["", "cProfile of one one-entry sync (by own time):", "", _fence(_top(prof))]
    return "\n".join(lines)


def main() -> int:
    started = time.perf_counter()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = [
        "# Profiles of the write path's missed targets",
        "",
        f"Generated by `python -m bench.profiles` ({stamp}); see docs/performance.md, "
        '"Where the time goes".',
    ]
    with tempfile.TemporaryDirectory(prefix="podstore-profiles-") as tmp:
        steps: list[tuple[str, Callable[[str], str]]] = [
            ("insert", (lambda d: insert_cpu(d, 100, 200)) if QUICK else insert_cpu),
            ("import", (lambda d: import_profile(d, 300, 1)) if QUICK else import_profile),
            ("follower", (lambda d: follower_profile(d, 2_000)) if QUICK else follower_profile),
        ]
        for name, fn in steps:
            d = os.path.join(tmp, name)
            os.makedirs(d)
            print(f"[{time.perf_counter() - started:6.1f}s] {name}", file=sys.stderr, flush=True)
            parts += ["", fn(d)]
    out = OUT if not QUICK else os.path.join(tempfile.gettempdir(), "podstore-profiles.md")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")
    print(f"wrote {out} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
