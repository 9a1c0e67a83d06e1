"""``python -m bench`` section: following a live checkpoint (``podstore watch``).

- **Rename to committed sync**, at 100 / 1,000 / 10,000 entries with one changed entry: the
  bench renames a new checkpoint over the file a real ``podstore watch`` subprocess follows,
  and polls the store (``max(seq)`` of the history, every 0.2 ms) until the sync has committed.
  Side by side, interleaved: a **full re-import** of the same file
  (``PodStore.import_checkpoint``, in process, on a store one change behind) — what a node
  would run on each change without ``watch``. Target: ≥ 10× faster at 10,000 entries.
- **At 100,000 entries** (not with ``--quick``): the same rounds, and the follower's peak
  resident set (``VmHWM`` of its /proc status, start-up sync included) against the memory
  limit of deploy/podstore-watch-daemonset.yaml. Targets: a one-entry sync ≥ 20× faster than
  the re-import, and the peak within the limit.
- **Idle CPU**: the follower's CPU time (all its threads, ``/proc/PID/task/*/schedstat``) over
  an idle window, scaled to one hour.

One entry point, :func:`run`; :func:`console` and :func:`markdown` render its results.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import workload
from bench.measure import interleaved, stats
from bench.sections import Section, register
from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint

SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (100, 1_000, 10_000)
TARGET_SIZE = 10_000
TARGET_RATIO = 10.0
LARGE_SIZE = 100_000
LARGE_RATIO = 20.0
DAEMONSET = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "deploy",
    "podstore-watch-daemonset.yaml",
)
_POLL_S = 0.0002


def _entries(n: int, seed: int) -> tuple[list[PodDevicesEntry], dict[str, list[str]]]:
    w = workload.generate(n, seed)  # at least one entry per pod
    entries = w.entries()[:n]
    assert len(entries) == n
    return entries, w.registered


def _changed(entries: list[PodDevicesEntry], i: int) -> list[PodDevicesEntry]:
    """The entries with the middle one's devices changed (a different value each round)."""
    out = list(entries)
    k = len(out) // 2
    out[k] = dataclasses.replace(out[k], device_ids={0: [f"bench-moved-{i}"]})
    return out


def _write_temp(path: str, data: bytes) -> str:
    tmp = os.path.join(os.path.dirname(path), ".kubelet_internal_checkpoint.bench.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def _last_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM allocation_events").fetchone()
    return int(row[0])


def daemonset_memory_limit_kib(path: str = DAEMONSET) -> int | None:
    """The follower container's ``limits: memory:`` (``NNNMi`` or ``NGi``) of the DaemonSet,
    read from the manifest so that the target follows what is deployed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"limits:\s*\n(?:\s+\w+:.*\n)*?\s+memory:\s*\"?(\d+)(Mi|Gi)", text)
    if m is None:
        return None
    return int(m.group(1)) * (1024 if m.group(2) == "Mi" else 1024 * 1024)


def _peak_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _podstore() -> list[str]:
    installed = os.path.join(os.path.dirname(sys.executable), "podstore")
    if os.path.exists(installed):
        return [installed]
    return [sys.executable, "-c", "from podstore.cli import main; main()"]


def _cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid``, in ns precision (``schedstat``: time on a CPU);
    the clock-tick counters of ``stat`` are too coarse for an idle process."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


class _Follower:
    """A ``podstore watch`` subprocess on ``db`` following ``cp``."""

    def __init__(self, db: str, cp: str, log_path: str) -> None:
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*_podstore(), "--db", db, "watch", cp, "--interval", "10"],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.log_path = log_path

    def wait_started(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                if "following" in f.read():
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"podstore watch exited ({self.proc.returncode})")
            time.sleep(0.01)
        raise RuntimeError("podstore watch did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        finally:
            self.log.close()


def _size(n: int, reps: int, seed: int, workdir: str, log: Callable[[str], None]) -> dict[str, Any]:
    d = os.path.join(workdir, f"watch-{n}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "device-plugins"))
    cp = os.path.join(d, "device-plugins", "kubelet_internal_checkpoint")
    entries, registered = _entries(n, seed)
    data = dumps_checkpoint(entries, registered)
    with open(cp, "wb") as f:
        f.write(data)
    followed = os.path.join(d, "followed.db")
    reimported = os.path.join(d, "reimported.db")
    for db in (followed, reimported):
        with PodStore.open(db) as store:
            store.import_checkpoint(cp)
    # Each round's file, made ahead (encoding is not what is measured).
    files = [dumps_checkpoint(_changed(entries, i), registered) for i in range(reps + 1)]
    follower = _Follower(followed, cp, os.path.join(d, "watch.log"))
    probe = sqlite3.connect(followed, isolation_level=None)
    store = PodStore.open(reimported)
    synced: list[int] = []
    try:
        follower.wait_started()
        time.sleep(0.3)  # the start-up sync (unchanged) is done and the watch is armed

        def rename_to_commit(i: int) -> float:
            before = _last_seq(probe)
            tmp = _write_temp(cp, files[i])
            t0 = time.perf_counter()
            os.replace(tmp, cp)
            while _last_seq(probe) == before:
                waited = time.perf_counter() - t0
                if waited > 60:
                    raise RuntimeError("the follower did not sync within 60 s")
                # Fine polling at first, then gentler: on two cores a tight loop would slow
                # the follower it is timing.
                time.sleep(_POLL_S if waited < 0.02 else 0.002)
            synced.append(_last_seq(probe) - before)
            return time.perf_counter() - t0

        def reimport(i: int) -> float:
            # The file of round i is on disk once rename_to_commit(i) ran; the store is one
            # change behind, as the follower's was.
            t0 = time.perf_counter()
            store.import_checkpoint(cp)
            return time.perf_counter() - t0

        samples = interleaved(
            {"sync": rename_to_commit, "reimport": reimport},
            reps,
            budget_s=600.0,
            min_reps=3,
        )
        peak_rss = _peak_rss_kib(follower.proc.pid)
    finally:
        store.close()
        probe.close()
        follower.stop()
    if any(n_events != 1 for n_events in synced):
        raise RuntimeError(f"a one-entry change wrote {synced} events (expected 1 each)")
    sync_stats, reimport_stats = stats(samples["sync"]), stats(samples["reimport"])
    log(
        f"    watch @ {n:,} entries: rename→commit p50 {sync_stats.p50 * 1e3:.1f} ms, "
        f"re-import p50 {reimport_stats.p50 * 1e3:.1f} ms"
    )
    shutil.rmtree(d, ignore_errors=True)
    return {
        "entries": n,
        "file_bytes": len(data),
        "sync": sync_stats.as_dict(),
        "reimport": reimport_stats.as_dict(),
        "ratio_p50": reimport_stats.p50 / sync_stats.p50,
        "follower_peak_rss_kib": peak_rss,
    }


def _idle_cpu(workdir: str, seconds: float, seed: int, size: int) -> dict[str, Any]:
    d = os.path.join(workdir, "watch-idle")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "device-plugins"))
    cp = os.path.join(d, "device-plugins", "kubelet_internal_checkpoint")
    entries, registered = _entries(size, seed)
    with open(cp, "wb") as f:
        f.write(dumps_checkpoint(entries, registered))
    db = os.path.join(d, "idle.db")
    follower = _Follower(db, cp, os.path.join(d, "watch.log"))
    try:
        follower.wait_started()
        # Wait for the start-up sync (a full load of 10,000 entries) to end.
        probe = sqlite3.connect(db, isolation_level=None)
        try:
            deadline = time.monotonic() + 300
            while _last_seq(probe) < len(entries) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            probe.close()
        time.sleep(1.0)
        start_cpu, start = _cpu_seconds(follower.proc.pid), time.monotonic()
        time.sleep(seconds)
        used, elapsed = _cpu_seconds(follower.proc.pid) - start_cpu, time.monotonic() - start
    finally:
        follower.stop()
        shutil.rmtree(d, ignore_errors=True)
    return {
        "window_s": elapsed,
        "cpu_s": used,
        "cpu_s_per_hour": used / elapsed * 3600,
        "interval_s": 10,
        "entries": size,
    }


def run(cfg: Any, workdir: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Measure the watch section (``cfg``: the bench Config; only ``quick`` and ``seed`` are
    used). Returns JSON-ready results."""
    quick = bool(getattr(cfg, "quick", False))
    smoke = bool(getattr(cfg, "smoke", False))
    seed = int(getattr(cfg, "seed", 1))
    reps = {100: 15, 1_000: 10, 10_000: 5} if quick else {100: 60, 1_000: 40, 10_000: 20}
    reps[LARGE_SIZE] = 4
    if smoke:
        reps[100] = 3
    log("watch: rename → committed sync vs re-import")
    chosen = (100,) if smoke else QUICK_SIZES if quick else SIZES
    sizes = [_size(n, reps[n], seed, workdir, log) for n in chosen]
    log("watch: idle CPU")
    idle = _idle_cpu(
        workdir, 1.0 if smoke else 10.0 if quick else 60.0, seed, 100 if smoke else TARGET_SIZE
    )
    return {"sizes": sizes, "idle": idle}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for s in results["sizes"]:
        rows.append(
            [
                f"{s['entries']:,}",
                f"{_ms(s['sync']['p50_s'])} / {_ms(s['sync']['p99_s'])}",
                f"{_ms(s['reimport']['p50_s'])} / {_ms(s['reimport']['p99_s'])}",
                f"{s['ratio_p50']:.1f}×",
                str(s["sync"]["n"]),
                (
                    f"{s['follower_peak_rss_kib'] / 1024:.0f} MiB"
                    if s.get("follower_peak_rss_kib")
                    else ""
                ),
            ]
        )
    return rows


def _ratio_verdict(results: dict[str, Any], size: int, limit: float) -> tuple[str, bool | None]:
    at = [s for s in results.get("sizes", []) if s["entries"] == size]
    name = f"one-entry sync ≥ {limit:.0f}× faster than re-import @ {size:,} entries"
    if not at:
        return f"{name}: not measured", None
    ratio = at[0]["ratio_p50"]
    passed = ratio >= limit
    return f"{name}: {ratio:.1f}× — {'PASS' if passed else 'MISS'}", passed


def verdicts(results: dict[str, Any]) -> list[tuple[str, bool | None]]:
    """Each target line and whether it passed (None: not measured)."""
    out = [
        _ratio_verdict(results, TARGET_SIZE, TARGET_RATIO),
        _ratio_verdict(results, LARGE_SIZE, LARGE_RATIO),
    ]
    at = [s for s in results.get("sizes", []) if s["entries"] == LARGE_SIZE]
    limit = daemonset_memory_limit_kib()
    peak = at[0].get("follower_peak_rss_kib") if at else None
    name = f"follower peak RSS @ {LARGE_SIZE:,} entries within the DaemonSet's memory limit"
    if peak is None or limit is None:
        out.append((f"{name}: not measured", None))
    else:
        passed = peak <= limit
        out.append(
            (
                f"{name}: {peak / 1024:.0f} MiB vs {limit / 1024:.0f} MiB — "
                f"{'PASS' if passed else 'MISS'}",
                passed,
            )
        )
    return out


def markdown(results: dict[str, Any]) -> str:
    """This section's part of latest.md, from what :func:`run` returned."""
    head = (
        "| entries | rename → committed sync p50 / p99 | full re-import p50 / p99 | ratio | n "
        "| follower peak RSS |"
    )
    rule = "|---|---|---|---|---|---|"
    lines = ["", "## Following a checkpoint (podstore watch)", "", head, rule]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(results)]
    idle = results["idle"]
    lines += [
        "",
        f"Idle follower ({idle['entries']:,} entries, --interval {idle['interval_s']}): "
        f"{idle['cpu_s_per_hour']:.2f} CPU-seconds per hour "
        f"({idle['cpu_s']:.3f} s over {idle['window_s']:.0f} s).",
        "",
        "Targets:",
        "",
        *(f"- {line}" for line, _ in verdicts(results)),
        "",
    ]
    return "\n".join(lines)


register(
    Section(
        "watch",
        "podstore watch: rename → committed sync vs re-import; idle CPU",
        run=lambda ctx: run(ctx.cfg, ctx.workdir, ctx.log),
        render=markdown,
    )
)


if __name__ == "__main__":
    # `python -m bench.watch [--quick]`: this section alone, printed (`python -m bench --only
    # watch` runs it into latest.md).
    import tempfile
    from types import SimpleNamespace

    started = time.perf_counter()

    def _log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="podstore-bench-watch-") as tmp:
        config = SimpleNamespace(quick="--quick" in sys.argv[1:], seed=20240601)
        print(markdown(run(config, tmp, _log)))
