"""``python -m bench`` section: keeping the node's CPU, memory and DRA state in the store.

For each of the CPU (v4), memory (v3) and DRA (data) files at 110 pods (kubelet's default
``maxPods``) and 1,000 pods (the states of ``bench/nodefiles.py``):

- **import**: ``PodStore.import_node_checkpoint`` of the file into a store holding none of it
  (every item written, with its history events);
- **sync**: the same call when one container changed since the last sync (what
  ``watch --kubelet-dir`` runs on a rewrite of new bytes: read, verify, diff in SQL, one
  event), the file alternating between two states;
- **json.loads** of the same bytes, the floor of reading the file in Python (shown, not judged).

Targets: a one-container sync p50 ≤ 15 ms at 110 pods and ≤ 60 ms at 1,000 pods. And the
**peak RSS** of a fresh process importing the 1,000-pod file into a new store, above its RSS
just before.

Then a whole node of 1,000 pods (devices, CPUs, memory, DRA claims, a two-node topology, pod
names): ``PodStore.topology()`` and ``SELECT * FROM v_container_numa``, p50 — target ≤ 50 ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.measure import interleaved, stats
from bench.nodefiles import _uid, cpu_state, dra_state, memory_state
from bench.sections import Section, register
from bench.targets import NODE_SYNC_LIMIT_S
from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import (
    CPUManagerState,
    DRAState,
    MemoryBlock,
    MemoryManagerState,
    NumaTopology,
    PodName,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
)

SIZES = (110, 1_000)
KINDS = ("cpu", "memory", "dra")
#: One-change sync p50 limit by pod count (seconds).
SYNC_LIMIT_S = NODE_SYNC_LIMIT_S
QUERY_LIMIT_S = 0.050


def states(kind: str, pods: int) -> tuple[bytes, bytes]:
    """The file of ``pods`` pods, and the same with one container changed."""
    if kind == "cpu":
        a: CPUManagerState = cpu_state(pods, 4)
        b = cpu_state(pods, 4)
        b.entries = {**b.entries, _uid(0): {**b.entries[_uid(0)], "sidecar": frozenset({1})}}
        return dumps_cpu_state(a), dumps_cpu_state(b)
    if kind == "memory":
        m: MemoryManagerState = memory_state(pods, 3)
        n = memory_state(pods, 3)
        containers = n.entries[_uid(0)]
        assert containers is not None
        n.entries = {
            **n.entries,
            _uid(0): {**containers, "main": [MemoryBlock([1], "memory", 1 << 30)]},
        }
        return dumps_memory_state(m), dumps_memory_state(n)
    d: DRAState = dra_state(pods)
    e = dra_state(pods)
    first = e.claims[0].driver_state
    assert first is not None
    devices = first["gpu.example.com"]
    assert devices is not None
    devices.pop()
    return dumps_dra_state(d), dumps_dra_state(e)


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _import_fresh(workdir: str, kind: str, data: bytes, n: int) -> float:
    db = f"{workdir}/import-{kind}-{n}.db"
    path = f"{workdir}/import-{kind}-{n}.json"
    _write(path, data)
    with PodStore.open(db) as store:
        t0 = time.perf_counter()
        store.import_node_checkpoint(path, kind=kind)
        dt = time.perf_counter() - t0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(db + suffix)
    return dt


def _child(kind: str, path: str, db: str) -> dict[str, Any]:
    """Peak RSS of a fresh process importing one file into a new store."""

    def status(field: str) -> int:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    before = status("VmRSS")
    with PodStore.open(db) as store:
        store.import_node_checkpoint(path, kind=kind)
    return {"rss_before_kib": before, "peak_rss_kib": status("VmHWM")}


def _peak_rss(kind: str, path: str, db: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.nodestate", "--child", kind, path, db],
        capture_output=True,
        check=True,
        text=True,
        timeout=600,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def whole_node(store: PodStore, pods: int) -> None:
    """A node of ``pods`` pods with every kind of state, meeting in the joins."""
    entries = [
        PodDevicesEntry(_uid(i), "main", "nvidia.com/gpu", {i % 2: [f"GPU-{i}"]}, b"")
        for i in range(pods)
    ]
    with store.transaction():
        store.from_checkpoint_data(entries)
        store.set_cpu_state(cpu_state(pods, 4))
        store.set_memory_state(memory_state(pods, 3))
        store.set_dra_state(dra_state(pods))
        store.set_numa_topology(
            NumaTopology({0: frozenset(range(0, 128)), 1: frozenset(range(128, 256))})
        )
        store.set_pod_names({_uid(i): PodName("default", f"pod-{i}") for i in range(pods)})


def run(cfg: Any, workdir: str, log: Callable[[str], None]) -> dict[str, Any]:
    quick = bool(getattr(cfg, "quick", False))
    reps = {110: 20, 1_000: 8} if quick else {110: 80, 1_000: 30}
    if getattr(cfg, "smoke", False):
        reps = {110: 3, 1_000: 2}
    rows = []
    for kind in KINDS:
        for pods in SIZES:
            log(f"nodestate: {kind} @ {pods} pods")
            a, b = states(kind, pods)
            path = f"{workdir}/{kind}-{pods}.json"
            db = f"{workdir}/{kind}-{pods}.db"
            _write(path, a)
            with PodStore.open(db) as store:
                store.import_node_checkpoint(path, kind=kind)
                flip = [a, b]

                def sync(
                    i: int,
                    store: PodStore = store,
                    flip: list[bytes] = flip,
                    path: str = path,
                    kind: str = kind,
                ) -> float:
                    _write(path, flip[(i + 1) % 2])
                    t0 = time.perf_counter()
                    report = store.import_node_checkpoint(path, kind=kind)
                    dt = time.perf_counter() - t0
                    assert report.events >= 1, report
                    return dt

                samples = interleaved(
                    {
                        "sync": sync,
                        "json_loads": lambda _i, data=b: json.loads(data),
                        "import": lambda i, data=a, kind=kind: _import_fresh(
                            workdir, kind, data, i
                        ),
                    },
                    reps[pods],
                    budget_s=3.0 if quick else 10.0,
                )
            s, j, imp = (stats(samples[k]) for k in ("sync", "json_loads", "import"))
            row: dict[str, Any] = {
                "kind": kind,
                "pods": pods,
                "bytes": len(a),
                "import": imp.as_dict(),
                "sync": s.as_dict(),
                "json_loads": j.as_dict(),
                "sync_ratio_p50": s.p50 / j.p50,
            }
            if pods == SIZES[-1]:
                child = _peak_rss(kind, path, f"{workdir}/rss-{kind}.db")
                row["peak_rss_kib"] = child["peak_rss_kib"]
                row["rss_added_kib"] = child["peak_rss_kib"] - child["rss_before_kib"]
            rows.append(row)
    log("nodestate: topology and v_container_numa @ 1,000 pods")
    queries: dict[str, Any] = {}
    with PodStore.open(f"{workdir}/whole.db") as store:
        whole_node(store, SIZES[-1])
        samples = interleaved(
            {
                "topology": lambda _i: store.topology(),
                "v_container_numa": lambda _i: store.query("SELECT * FROM v_container_numa"),
            },
            3 if getattr(cfg, "smoke", False) else 20 if quick else 60,
            budget_s=5.0,
        )
        rows_numa = len(store.query("SELECT * FROM v_container_numa").rows)
    for name, values in samples.items():
        queries[name] = stats(values).as_dict()
    return {"rows": rows, "queries": queries, "container_rows": rows_numa}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def markdown(results: dict[str, Any]) -> str:
    """This section's part of latest.md, with the targets' verdicts."""
    lines = [
        "",
        "## Keeping the node's CPU, memory and DRA state (import, one-change sync, views)",
        "",
        "| file | pods | bytes | import p50 | one-change sync p50 / p99 | json.loads p50 | "
        "sync ÷ parse | peak RSS (added) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        rss = (
            f"{r['peak_rss_kib'] / 1024:.1f} MiB (+{r['rss_added_kib'] / 1024:.1f})"
            if "peak_rss_kib" in r
            else ""
        )
        lines.append(
            f"| {r['kind']} | {r['pods']:,} | {r['bytes']:,} | {_ms(r['import']['p50_s'])} | "
            f"{_ms(r['sync']['p50_s'])} / {_ms(r['sync']['p99_s'])} | "
            f"{_ms(r['json_loads']['p50_s'])} | {r['sync_ratio_p50']:.1f}× | {rss} |"
        )
    lines += ["", "| target | measured | limit | verdict |", "|---|---|---|---|"]
    for r in results["rows"]:
        limit = SYNC_LIMIT_S.get(r["pods"])
        if limit is not None:
            p50 = r["sync"]["p50_s"]
            lines.append(
                f"| {r['kind']} one-change sync p50 @ {r['pods']:,} pods | {_ms(p50)} | "
                f"≤ {limit * 1e3:.0f} ms | {'met' if p50 <= limit else 'MISSED'} |"
            )
    for name, q in results["queries"].items():
        ok = q["p50_s"] <= QUERY_LIMIT_S
        lines.append(
            f"| `{name}` @ 1,000 pods | {_ms(q['p50_s'])} | ≤ {QUERY_LIMIT_S * 1e3:.0f} ms | "
            f"{'met' if ok else 'MISSED'} |"
        )
    lines += [
        "",
        "Import: `import_node_checkpoint` into a store without that state (every item and its "
        "event written). Sync: the same call after one container changed (read, verify, diff, "
        "one event), the file alternating between two states (the follower skips a rewrite of "
        "the same bytes; that is not measured here). json.loads: Python's parser on "
        "the same bytes, the floor of reading the file. Peak RSS: a fresh process importing "
        f"the 1,000-pod file into a new store. The whole node for the views: "
        f"{results['container_rows']:,} rows of `v_container_numa`.",
        "",
    ]
    return "\n".join(lines)


register(
    Section(
        "nodestate",
        "import and one-change sync (ms) of the CPU / memory / DRA files at 110 and 1,000 pods; "
        "peak RSS; topology and v_container_numa at 1,000 pods",
        run=lambda ctx: run(ctx.cfg, ctx.workdir, ctx.log),
        render=markdown,
    )
)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        json.dump(_child(sys.argv[2], sys.argv[3], sys.argv[4]), sys.stdout)
        raise SystemExit(0)
    import tempfile
    from types import SimpleNamespace

    started = time.perf_counter()

    def _log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="podstore-bench-nodestate-") as tmp:
        config = SimpleNamespace(quick="--quick" in sys.argv[1:], seed=20240601)
        print(markdown(run(config, tmp, _log)))
