"""Physical devices across the device plugin and DRA (docs/sql.md, "Physical devices"): each
fixture node is written as kubelet's files and a CDI directory, loaded by a real
``podstore import-node`` subprocess, and read through the views and ``podstore metrics``.

Found: one card through the device plugin and DRA (by a CDI name, by a host path), a MIG
partition beside its whole GPU, one unresolved device held twice. Not found: replicas of one
time-sliced card, DRA shares, a DRA device in two claims (admin access), two MIG partitions of
one GPU, one claim used by two pods, one pod reaching a card through both mechanisms.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness.cli import podstore
from harness.physical import (
    GPU,
    PhysicalNode,
    card,
    claim,
    entry,
    pod,
    response,
)

from podstore import PodStore

SHARED = "nvidia.com/gpu.shared"
CARD = "example.com/card"


def load(root: Path, node: PhysicalNode) -> Path:
    kubelet, cdi = node.write(root)
    db = root / "store.db"
    out = podstore(
        "--db", str(db), "import-node", str(kubelet), "--sysfs", str(root / "no-sys"),
        "--pod-logs", str(root / "no-logs"), "--cdi-dir", str(cdi), cwd=root,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return db


def rows(db: Path, view: str) -> list[dict[str, Any]]:
    with PodStore.open(db, readonly=True) as store:
        return sorted(store.query(f"SELECT * FROM {view}").dicts(), key=repr)


def doubles(db: Path) -> set[tuple[str, str, str, int]]:
    """(mechanism, device, pod, pod_count) of every row of v_physical_double_allocations."""
    return {
        (r["mechanism"], r["device"], r["pod_uid"][:1], r["pod_count"])
        for r in rows(db, "v_physical_double_allocations")
    }


def metric(db: Path, root: Path) -> float:
    out = podstore("--db", str(db), "metrics", cwd=root)
    assert out.returncode == 0, out.stderr
    (line,) = [
        x for x in out.stdout.splitlines() if x.startswith("podstore_physical_double_allocations ")
    ]
    return float(line.split()[1])


def nodes(k: int) -> str:
    return json.dumps(sorted([card(k), "/dev/nvidia-uvm", "/dev/nvidiactl"]), separators=(",", ":"))


# ---- found ------------------------------------------------------------------------------------


def test_one_card_through_the_device_plugin_and_dra_is_found(tmp_path: Path) -> None:
    node = PhysicalNode(
        entries=[
            # by the response's CDI name
            entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",))),
            # by the response's host path, the resource naming no CDI device
            entry("c", ["card-1"], response(host_paths=(card(1),)), resource=CARD),
            entry("e", ["GPU-2"], response(cdi=(f"{GPU}=GPU-2",))),  # held alone
        ],
        registered={GPU: ["GPU-0", "GPU-2"], CARD: ["card-1"]},
        claims=[
            claim("b", ["b"], "gpu-0", [f"{GPU}=GPU-0"]),
            claim("d", ["d"], "gpu-1", [f"{GPU}=GPU-1"]),
        ],
    )
    db = load(tmp_path, node)
    assert doubles(db) == {
        ("device-plugin", "GPU-0", "a", 2),
        ("dra", "pool/gpu-0", "b", 2),
        ("device-plugin", "card-1", "c", 2),
        ("dra", "pool/gpu-1", "d", 2),
    }
    found = {r["device"]: r for r in rows(db, "v_physical_double_allocations")}
    assert found["GPU-0"]["physical_id"] == found["pool/gpu-0"]["physical_id"] == nodes(0)
    # The host path alone names card 1; DRA's CDI device adds the control nodes to it.
    assert found["card-1"]["physical_id"] == json.dumps([card(1)])
    assert found["pool/gpu-1"]["physical_id"] == nodes(1)
    assert found["pool/gpu-0"]["namespace"] == "default" and found["GPU-0"]["container"] == "main"
    assert found["pool/gpu-0"]["container"] is None
    held = {r["device"]: r for r in rows(db, "v_physical_devices")}
    assert held["GPU-2"]["physical_id"] == nodes(2) and held["GPU-2"]["share"] == 1.0
    assert all(r["resolved"] == 1 for r in held.values())
    # v_double_allocations keeps its meaning: no device-plugin device is held twice.
    assert rows(db, "v_double_allocations") == []
    assert metric(db, tmp_path) == 3  # three physical ids: card 0, card 1 alone, card 1's CDI


def test_a_mig_partition_beside_its_whole_gpu_is_found_two_partitions_are_not(
    tmp_path: Path,
) -> None:
    node = PhysicalNode(
        entries=[
            entry("k", ["MIG-5-1"], response(cdi=(f"{GPU}=MIG-5-1",))),
            entry("m", ["MIG-6-0"], response(cdi=(f"{GPU}=MIG-6-0",))),
            entry("n", ["MIG-6-1"], response(cdi=(f"{GPU}=MIG-6-1",))),
        ],
        registered={GPU: ["MIG-5-1", "MIG-6-0", "MIG-6-1"]},
        claims=[claim("l", ["l"], "gpu-5", [f"{GPU}=GPU-5"])],
    )
    db = load(tmp_path, node)
    assert doubles(db) == {("device-plugin", "MIG-5-1", "k", 2), ("dra", "pool/gpu-5", "l", 2)}
    held = {r["device"]: r["physical_id"] for r in rows(db, "v_physical_devices")}
    assert json.loads(held["MIG-5-1"]) == sorted(
        [*json.loads(nodes(5)), "/dev/nvidia-caps/nvidia-cap51"]
    )
    assert metric(db, tmp_path) == 2


def test_an_unresolved_device_keeps_its_own_id_and_is_found_when_held_twice(
    tmp_path: Path,
) -> None:
    node = PhysicalNode(
        entries=[entry("u", ["X-1"]), entry("v", ["X-1"]), entry("w", ["X-2::1"])],
        registered={GPU: ["X-1"]},
    )
    db = load(tmp_path, node)
    held = {(r["device"], r["pod_uid"][:1]): r for r in rows(db, "v_physical_devices")}
    assert held["X-1", "u"]["physical_id"] == f"device-plugin:{GPU}:X-1"
    assert held["X-1", "u"]["resolved"] == 0
    # A replica whose base is not registered: its base's id, its share unknown.
    assert held["X-2::1", "w"]["physical_id"] == f"device-plugin:{GPU}:X-2"
    assert held["X-2::1", "w"]["share"] is None
    assert doubles(db) == {("device-plugin", "X-1", "u", 2), ("device-plugin", "X-1", "v", 2)}
    assert {(r["device_id"], r["pod_uid"][:1]) for r in rows(db, "v_double_allocations")} == {
        ("X-1", "u"),
        ("X-1", "v"),
    }


def test_a_replica_beside_a_whole_card_of_dra_is_found(tmp_path: Path) -> None:
    node = PhysicalNode(
        entries=[entry("e", ["GPU-2::0"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED)],
        registered={SHARED: [f"GPU-2::{i}" for i in range(4)]},
        claims=[claim("p", ["p"], "gpu-2", [f"{GPU}=GPU-2"])],
    )
    db = load(tmp_path, node)
    assert doubles(db) == {("device-plugin", "GPU-2::0", "e", 2), ("dra", "pool/gpu-2", "p", 2)}


# ---- declared sharing: not found ---------------------------------------------------------------


@pytest.mark.parametrize(
    "node",
    [
        pytest.param(
            PhysicalNode(
                entries=[
                    entry("e", ["GPU-2::0"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
                    entry("f", ["GPU-2::1"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
                ],
                registered={SHARED: [f"GPU-2::{i}" for i in range(4)]},
            ),
            id="replicas",
        ),
        pytest.param(
            PhysicalNode(
                claims=[
                    claim("g", ["g"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s1"),
                    claim("h", ["h"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s2"),
                ]
            ),
            id="dra-shares",
        ),
        pytest.param(
            PhysicalNode(
                claims=[
                    claim("i", ["i"], "gpu-4", [f"{GPU}=GPU-4"]),
                    claim("j", ["j"], "gpu-4", [f"{GPU}=GPU-4"]),
                ]
            ),
            id="dra-admin-access",
        ),
        pytest.param(
            PhysicalNode(claims=[claim("s", ["s", "t"], "gpu-6", [f"{GPU}=GPU-6"])]),
            id="one-claim-two-pods",
        ),
        pytest.param(
            PhysicalNode(
                entries=[entry("o", ["GPU-7"], response(cdi=(f"{GPU}=GPU-7",)))],
                registered={GPU: ["GPU-7"]},
                claims=[claim("o", ["o"], "gpu-7", [f"{GPU}=GPU-7"])],
            ),
            id="one-pod-both-mechanisms",
        ),
    ],
)
def test_declared_sharing_is_not_a_double_allocation(tmp_path: Path, node: PhysicalNode) -> None:
    db = load(tmp_path, node)
    held = rows(db, "v_physical_devices")
    assert len({r["physical_id"] for r in held if r["resolved"]}) == 1
    assert rows(db, "v_physical_double_allocations") == []
    assert metric(db, tmp_path) == 0


def test_shares(tmp_path: Path) -> None:
    node = PhysicalNode(
        entries=[
            entry("e", ["GPU-2::0"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
            entry("f", ["GPU-2::1"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
        ],
        registered={SHARED: [f"GPU-2::{i}" for i in range(4)]},
        claims=[
            claim("g", ["g"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s1"),
            claim("h", ["h"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s2"),
            claim("r", ["r"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s3"),
            claim("s", ["s", "t"], "gpu-6", [f"{GPU}=GPU-6"]),
        ],
    )
    db = load(tmp_path, node)
    share = {(r["device"], r["pod_uid"][:1]): r["share"] for r in rows(db, "v_physical_devices")}
    assert share == {
        ("GPU-2::0", "e"): 0.25,  # 1 of the 4 replicas registered
        ("GPU-2::1", "f"): 0.25,
        ("pool/gpu-3", "g"): pytest.approx(1 / 3),  # 3 holders of the DRA device
        ("pool/gpu-3", "h"): pytest.approx(1 / 3),
        ("pool/gpu-3", "r"): pytest.approx(1 / 3),
        ("pool/gpu-6", "s"): 0.5,  # one claim, two pods
        ("pool/gpu-6", "t"): 0.5,
    }
    identity = {r["device"]: r for r in rows(db, "v_device_identity")}
    # Registered replicas nobody holds are known too (unresolved: no CDI name for them).
    assert identity["GPU-2::3"]["share"] == 0.25
    assert identity["GPU-2::3"]["physical_id"] == f"device-plugin:{SHARED}:GPU-2"


def test_the_views_read_through_podstore_sql(tmp_path: Path) -> None:
    node = PhysicalNode(
        entries=[entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",)))],
        registered={GPU: ["GPU-0"]},
        claims=[claim("b", ["b"], "gpu-0", [f"{GPU}=GPU-0"])],
    )
    db = load(tmp_path, node)
    out = podstore(
        "--db", str(db), "sql", "-o", "json",
        "SELECT physical_id, mechanism, pod_uid, pod_count FROM v_physical_double_allocations "
        "ORDER BY mechanism", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [
        {"physical_id": nodes(0), "mechanism": "device-plugin", "pod_uid": pod("a"),
         "pod_count": 2},
        {"physical_id": nodes(0), "mechanism": "dra", "pod_uid": pod("b"), "pod_count": 2},
    ]  # fmt: skip


def test_import_node_without_cdi_resolves_host_paths_only(tmp_path: Path) -> None:
    node = PhysicalNode(
        entries=[
            entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",))),
            entry("c", ["card-1"], response(host_paths=(card(1),)), resource=CARD),
        ],
        registered={GPU: ["GPU-0"], CARD: ["card-1"]},
    )
    kubelet, _cdi = node.write(tmp_path)
    db = tmp_path / "store.db"
    out = podstore(
        "--db", str(db), "import-node", str(kubelet), "--sysfs", str(tmp_path / "no-sys"),
        "--pod-logs", str(tmp_path / "no-logs"), "--cdi-dir", str(tmp_path / "no-cdi"),
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"absent: CDI directory {tmp_path / 'no-cdi'} (left as it was)" in out.stdout
    held = {r["device"]: (r["physical_id"], r["resolved"]) for r in rows(db, "v_physical_devices")}
    assert held == {"GPU-0": (f"device-plugin:{GPU}:GPU-0", 0), "card-1": (f'["{card(1)}"]', 1)}


def test_a_claim_no_pod_uses_yet_is_listed_without_a_pod_and_clashes_with_nobody(
    tmp_path: Path,
) -> None:
    node = PhysicalNode(
        entries=[entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",)))],
        registered={GPU: ["GPU-0"]},
        claims=[claim("z", [], "gpu-0", [f"{GPU}=GPU-0"])],
    )
    db = load(tmp_path, node)
    held = {(r["mechanism"], r["pod_uid"], r["namespace"]) for r in rows(db, "v_physical_devices")}
    assert held == {("device-plugin", pod("a"), None), ("dra", None, "default")}
    assert rows(db, "v_physical_double_allocations") == []
