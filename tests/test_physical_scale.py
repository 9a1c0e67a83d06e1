"""The physical views on a 1,000-pod node of 21,000 entries: read in full by ``podstore sql``
child processes, timed (CPU) against the same read of ``v_allocations`` and
``v_double_allocations``, with peak memory, and what they find checked.

The node: 1,000 pods of 20 containers; 10,000 containers hold a card of their own (a CDI name
each), 10,000 a replica of 1,000 time-sliced cards (10 replicas each), 1,000 a MIG partition;
1,000 DRA claims hold cards, 10 of them a card the device plugin gave too. The figures are
printed (``-s``); the bound asserted is generous, against the baseline measured here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from harness import scale_store as ss
from harness.physical import DRIVER, GPU, PhysicalNode, claim, entry, response

from podstore import PodStore

PODS, CONTAINERS = 1_000, 20
OWN = 10_000  # entries holding a card of their own
SHARED = "nvidia.com/gpu.shared"
MIG = "nvidia.com/mig-1g.10gb"
DOUBLED = 10


def _spec(cards: int) -> dict[str, object]:
    devices: list[dict[str, object]] = []
    for k in range(cards):
        nodes = [{"path": f"/dev/nvidia{k}"}]
        devices.append({"name": f"GPU-{k}", "containerEdits": {"deviceNodes": nodes}})
    for k in range(OWN, OWN + PODS):  # cards split in MIG partitions
        cap = [{"path": f"/dev/nvidia{k}"}, {"path": f"/dev/nvidia-caps/nvidia-cap{k}"}]
        devices.append({"name": f"MIG-{k}", "containerEdits": {"deviceNodes": cap}})
    return {
        "cdiVersion": "0.6.0",
        "kind": GPU,
        "devices": devices,
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
    }


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("physical-scale")
    entries, n = [], 0
    for p in range(PODS):
        for c in range(CONTAINERS):
            if n < OWN:
                resp = response(cdi=(f"{GPU}=GPU-{n}",))
                entries.append(entry(f"p{p}", [f"GPU-{n}"], resp, GPU, f"c{c}"))
            else:
                base = OWN + PODS + (n - OWN) // 10
                resp = response(cdi=(f"{GPU}=GPU-{base}",))
                entries.append(entry(f"p{p}", [f"GPU-{base}::{n % 10}"], resp, SHARED, f"c{c}"))
            n += 1
        mig = OWN + p
        entries.append(entry(f"p{p}", [f"MIG-{mig}"], response(cdi=(f"{GPU}=MIG-{mig}",)), MIG))
    registered = {
        GPU: [f"GPU-{k}" for k in range(OWN)],
        SHARED: [f"GPU-{OWN + PODS + b}::{r}" for b in range(1_000) for r in range(10)],
        MIG: [f"MIG-{OWN + p}" for p in range(PODS)],
    }
    claims = [
        claim(f"d{i}", [f"d{i}"], f"gpu-{i}", [f"{GPU}=GPU-{_dra_card(i)}"]) for i in range(PODS)
    ]
    node = PhysicalNode(entries=entries, registered=registered, claims=claims, cards=0)
    kubelet, cdi = node.write(root)
    (cdi / "nvidia.json").write_text(json.dumps(_spec(OWN + PODS + 1_000 + PODS)))
    db = root / "big.db"
    with PodStore.open(db) as store:
        report = store.import_node(kubelet, sysfs=root / "x", pod_logs=root / "y", cdi_dirs=[cdi])
        assert report.cdi is not None and report.cdi.devices == OWN + PODS + 1_000 + 2 * PODS
    return db


def _dra_card(i: int) -> int:
    # The first DOUBLED claims take a card a container holds; the others, cards nobody does
    # (beyond the time-sliced ones).
    return i if i < DOUBLED else OWN + PODS + 1_000 + i


def _read(db: Path, view: str) -> ss.Measured:
    argv = ss.podstore_argv("--db", str(db), "sql", "--timeout", "0", "-o", "csv")
    return ss.measure([*argv, f"SELECT * FROM {view}"])


def test_the_physical_views_at_node_scale(big: Path) -> None:
    with PodStore.open(big, readonly=True) as store:
        (entries,) = store.query("SELECT count(*) FROM allocations").rows[0]
        assert entries == PODS * CONTAINERS + PODS
        double = store.query(
            "SELECT mechanism, count(*), max(pod_count) FROM v_physical_double_allocations "
            "GROUP BY mechanism ORDER BY mechanism"
        ).rows
        assert [tuple(r) for r in double] == [("device-plugin", DOUBLED, 2), ("dra", DOUBLED, 2)]
        shares = store.query(
            "SELECT mechanism, resource, min(share), max(share), min(resolved) "
            "FROM v_physical_devices GROUP BY mechanism, resource ORDER BY 1, 2"
        ).rows
    assert [tuple(r) for r in shares] == [
        ("device-plugin", GPU, 1.0, 1.0, 1),
        ("device-plugin", SHARED, 0.1, 0.1, 1),
        ("device-plugin", MIG, 1.0, 1.0, 1),
        ("dra", DRIVER, 1.0, 1.0, 1),
    ]
    figures = {}
    for view in ("v_allocations", "v_double_allocations", "v_physical_devices",
                 "v_physical_double_allocations", "v_device_identity"):  # fmt: skip
        runs = [_read(big, view) for _ in range(2)]
        assert all(m.code == 0 for m in runs), runs[0].stderr
        figures[view] = (min(m.cpu_s for m in runs), max(m.peak_rss_mib for m in runs))
    runs = [ss.measure(ss.podstore_argv("--db", str(big), "metrics")) for _ in range(2)]
    assert all(m.code == 0 for m in runs), runs[0].stderr
    figures["podstore metrics"] = (min(m.cpu_s for m in runs), max(m.peak_rss_mib for m in runs))
    load = os.getloadavg()[0]
    print(f"\n{entries:,} entries, {PODS:,} pods, load {load:.2f}: CPU s / peak RSS MiB")
    for view, (cpu, rss) in figures.items():
        print(f"  {view}: {cpu:.2f} s, {rss:.0f} MiB")
    base_cpu = figures["v_allocations"][0]
    # Generous: a full read of the physical views stays within 25 times a full read of the
    # allocations (both whole child processes, measured here, on the same machine).
    assert figures["v_physical_devices"][0] < 25 * base_cpu
    assert figures["v_physical_double_allocations"][0] < 25 * base_cpu
