"""``python -m bench`` section: reading the node's checkpoint files of every kind.

For each kind and format — devices v2, CPU v2 and v4, memory v1 and v3, DRA data — at 10 / 100
/ 1,000 pods: **read + verify** (the kind's reader on the file's bytes: Go-rule decoding,
checksum, cpusets) against ``json.loads`` of the same bytes, the floor of reading a JSON file
in Python; interleaved, per-call p50 / p99. And the **peak RSS** of a fresh process that reads
the 1,000-pod file, above the same process's RSS just before.

Each pod is what a GPU node with the static CPU and memory managers and a DRA driver holds:
two containers with exclusive CPUs, one memory and one 1 GiB hugepage block each on the pod's
NUMA node, a DRA claim with two devices; the device file has the workload generator's entries.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import workload
from bench.measure import interleaved, stats
from bench.sections import Section, register
from podstore.checkpoint import (
    CPUManagerState,
    DRAClaim,
    DRADevice,
    DRAState,
    MemoryBlock,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
    dumps_checkpoint,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
    read_checkpoint,
    read_cpu_state,
    read_dra_state,
    read_memory_state,
)

SIZES = (10, 100, 1_000)
GIB = 1 << 30
FORMATS = ("devices v2", "cpu v2", "cpu v4", "memory v1", "memory v3", "dra data")
READERS: dict[str, Callable[[bytes], object]] = {
    "devices": read_checkpoint,
    "cpu": read_cpu_state,
    "memory": read_memory_state,
    "dra": read_dra_state,
}


def _uid(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-{i:012x}"


def cpu_state(pods: int, version: int) -> CPUManagerState:
    entries = {}
    pod_entries = {}
    for i in range(pods):
        base = 4 + (4 * i) % 250
        entries[_uid(i)] = {"main": frozenset({base, base + 1}), "sidecar": frozenset({base + 2})}
        if version >= 3:
            pod_entries[_uid(i)] = frozenset(range(base, base + 4))
    return CPUManagerState(
        "static", frozenset(range(0, 4)), entries, pod_entries=pod_entries, version=version
    )


def memory_state(pods: int, version: int) -> MemoryManagerState:
    def table(total: int) -> MemoryTable:
        reserved = min(total, GIB)
        held = min(total - reserved, pods * GIB)
        return MemoryTable(total, reserved, total - reserved, held, total - reserved - held)

    machine: dict[int, NUMANodeState | None] = {
        node: NUMANodeState(
            pods,
            {
                "memory": table(512 * GIB),
                "hugepages-1Gi": table(256 * GIB),
                "hugepages-2Mi": table(0),
            },
            [node],
        )
        for node in (0, 1)
    }
    entries: dict[str, dict[str, list[MemoryBlock] | None] | None] = {}
    pod_entries: dict[str, list[MemoryBlock] | None] = {}
    for i in range(pods):
        node = i % 2
        blocks = [MemoryBlock([node], "memory", 4 * GIB), MemoryBlock([node], "hugepages-1Gi", GIB)]
        entries[_uid(i)] = {"main": blocks, "sidecar": blocks[:1]}
        if version >= 2:
            pod_entries[_uid(i)] = blocks
    return MemoryManagerState("Static", machine, entries, pod_entries, version=version)


def dra_state(pods: int) -> DRAState:
    claims = [
        DRAClaim(
            _uid(1_000_000 + i),
            f"gpu-claim-{i}",
            "default",
            frozenset({_uid(i)}),
            {
                "gpu.example.com": [
                    DRADevice(
                        "node-1",
                        f"gpu-{(2 * i + k) % 8}",
                        ["gpus"],
                        [f"k8s.gpu.example.com/gpu={_uid(1_000_000 + i)}-gpu-{k}"],
                    )
                    for k in range(2)
                ]
            },
        )
        for i in range(pods)
    ]
    return DRAState(claims)


def file_bytes(fmt: str, pods: int, seed: int) -> bytes:
    kind, version = fmt.split()
    if kind == "devices":
        w = workload.generate(pods, seed)
        return dumps_checkpoint(w.entries(), w.registered)
    if kind == "cpu":
        return dumps_cpu_state(cpu_state(pods, int(version[1:])))
    if kind == "memory":
        return dumps_memory_state(memory_state(pods, int(version[1:])))
    return dumps_dra_state(dra_state(pods))


def _child(kind: str, path: str) -> dict[str, Any]:
    """Peak RSS of a fresh process reading one file (run as ``python -m bench.nodefiles``)."""

    def status(field: str) -> int:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    with open(path, "rb") as f:
        data = f.read()
    before = status("VmRSS")
    t0 = time.perf_counter()
    READERS[kind](data)
    dt = time.perf_counter() - t0
    return {"read_s": dt, "rss_before_kib": before, "peak_rss_kib": status("VmHWM")}


def _peak_rss(kind: str, path: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.nodefiles", "--child", kind, path],
        capture_output=True,
        check=True,
        text=True,
        timeout=600,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def run(cfg: Any, workdir: str, log: Callable[[str], None]) -> dict[str, Any]:
    quick = bool(getattr(cfg, "quick", False))
    seed = int(getattr(cfg, "seed", 1))
    reps = {10: 60, 100: 40, 1_000: 15} if quick else {10: 400, 100: 200, 1_000: 60}
    if getattr(cfg, "smoke", False):
        reps = {10: 3, 100: 3, 1_000: 2}
    rows = []
    for fmt in FORMATS:
        kind = fmt.split()[0]
        read = READERS[kind]
        for pods in SIZES:
            log(f"nodefiles: {fmt} @ {pods} pods")
            data = file_bytes(fmt, pods, seed)
            samples = interleaved(
                {
                    "read": lambda _i, read=read, data=data: read(data),
                    "json_loads": lambda _i, data=data: json.loads(data),
                },
                reps[pods],
                budget_s=3.0 if quick else 15.0,
            )
            r, j = stats(samples["read"]), stats(samples["json_loads"])
            row: dict[str, Any] = {
                "format": fmt,
                "pods": pods,
                "bytes": len(data),
                "read": r.as_dict(),
                "json_loads": j.as_dict(),
                "ratio_p50": r.p50 / j.p50,
            }
            if pods == SIZES[-1]:
                path = f"{workdir}/{kind}-{pods}"
                with open(path, "wb") as f:
                    f.write(data)
                child = _peak_rss(kind, path)
                row["peak_rss_kib"] = child["peak_rss_kib"]
                row["rss_added_kib"] = child["peak_rss_kib"] - child["rss_before_kib"]
            rows.append(row)
    return {"rows": rows}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def markdown(results: dict[str, Any]) -> str:
    """This section's part of latest.md, from what :func:`run` returned."""
    lines = [
        "",
        "## Reading the node's checkpoint files (devices, CPU, memory, DRA)",
        "",
        "| format | pods | bytes | read + verify p50 / p99 | json.loads p50 | ratio | "
        "peak RSS (added) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        rss = (
            f"{r['peak_rss_kib'] / 1024:.1f} MiB (+{r['rss_added_kib'] / 1024:.1f})"
            if "peak_rss_kib" in r
            else ""
        )
        lines.append(
            f"| {r['format']} | {r['pods']:,} | {r['bytes']:,} | "
            f"{_ms(r['read']['p50_s'])} / {_ms(r['read']['p99_s'])} | "
            f"{_ms(r['json_loads']['p50_s'])} | {r['ratio_p50']:.1f}× | {rss} |"
        )
    lines += [
        "",
        "Read + verify: the kind's reader on the file's bytes (Go decoding rules, checksum, "
        "cpusets); json.loads: Python's parser on the same bytes, the floor. Peak RSS: a fresh "
        "process reading the 1,000-pod file (added: above its RSS just before).",
        "",
    ]
    return "\n".join(lines)


register(
    Section(
        "nodefiles",
        "reading devices / CPU / memory / DRA checkpoints at 10-1,000 pods vs json.loads; peak RSS",
        run=lambda ctx: run(ctx.cfg, ctx.workdir, ctx.log),
        render=markdown,
    )
)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        json.dump(_child(sys.argv[2], sys.argv[3]), sys.stdout)
        raise SystemExit(0)
    # `python -m bench.nodefiles [--quick]`: this section alone, printed.
    import tempfile
    from types import SimpleNamespace

    started = time.perf_counter()

    def _log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="podstore-bench-nodefiles-") as tmp:
        config = SimpleNamespace(quick="--quick" in sys.argv[1:], seed=20240601)
        print(markdown(run(config, tmp, _log)))
