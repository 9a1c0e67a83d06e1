"""Measurements that need a fresh process: restart cost and peak memory.

Run as ``python -m bench.child MODE ARGS…``; prints one JSON object, which includes the
child's own peak RSS (``VmHWM`` of /proc/self/status, read just before exiting). Not
``ru_maxrss`` from ``wait4``/``RUSAGE_CHILDREN``: Linux carries the high-water mark of the
parent's address space across fork+exec into it, so a child of the (large) bench process
would report the parent's size.

Modes:
- ``open-podstore DB POD CONTAINER RESOURCE``: restart as podstore — ``PodStore.open`` plus one
  ``container_devices`` answer.
- ``open-kubelet FILE POD CONTAINER RESOURCE``: restart as kubelet — read the checkpoint,
  verify its checksum, rebuild the maps (``fromCheckpointData``, ``devices()``), answer.
- ``import DB FILE``: ``import_checkpoint`` into a new store (the memory figure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any


def _status_kib(field: str) -> int:
    """A ``kB`` field of /proc/self/status: VmRSS (now) or VmHWM (peak)."""
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _open_podstore(
    db: str, pod: str, container: str, resource: str, verify: str = "blocking"
) -> dict[str, Any]:
    t0 = time.perf_counter()
    # What a program that opens a store imports (``import podstore`` alone loads only the
    # errors, docs/performance.md): anything open or the first answer load later counts in
    # open_s.
    from podstore import PodStore

    t1 = time.perf_counter()
    store = PodStore.open(db, verify=verify)  # type: ignore[arg-type]
    answer = store.container_devices(pod, container, resource)
    t2 = time.perf_counter()
    store.close()
    return {"import_s": t1 - t0, "open_s": t2 - t1, "answer": sorted(answer or ())}


def _open_kubelet(path: str, pod: str, container: str, resource: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    from bench.kubelet import KubeletStyle

    rss_before = _status_kib("VmRSS")
    t1 = time.perf_counter()
    ks = KubeletStyle.load(path)
    answer = ks.maps.container_devices(pod, container, resource)
    t2 = time.perf_counter()
    return {
        "import_s": t1 - t0,
        "open_s": t2 - t1,
        "answer": sorted(answer or ()),
        "rss_before_kib": rss_before,
    }


def _import(db: str, path: str) -> dict[str, Any]:
    import podstore

    store = podstore.PodStore.open(db)
    rss_before = _status_kib("VmRSS")
    t0 = time.perf_counter()
    report = store.import_checkpoint(path)
    dt = time.perf_counter() - t0
    store.close()
    return {"import_s": dt, "entries": report.imported, "rss_before_kib": rss_before}


def main(argv: list[str]) -> int:
    mode, *args = argv
    if mode == "open-podstore":
        out = _open_podstore(*args)
    elif mode == "open-kubelet":
        out = _open_kubelet(*args)
    elif mode == "import":
        out = _import(*args)
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    out["peak_rss_kib"] = _status_kib("VmHWM")
    json.dump(out, sys.stdout)
    return 0


@dataclass(frozen=True, slots=True)
class ChildResult:
    out: dict[str, Any]
    peak_rss_kib: int
    wall_s: float


def run(mode: str, *args: str) -> ChildResult:
    """Run one child to completion; its JSON output and its own peak RSS."""
    cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.child", mode, *args],
        stdout=subprocess.PIPE,
        cwd=cwd,
    )
    assert proc.stdout is not None
    data = proc.stdout.read()
    code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"bench.child {mode} exited {code}")
    out = json.loads(data)
    return ChildResult(out, int(out["peak_rss_kib"]), wall)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
