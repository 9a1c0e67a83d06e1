"""A small node for the audit tests (docs queries, views, CLI), built with the public API.

Four pods on a two-NUMA node, at fixed times on 2026-12-01 (the history clock is substituted):

- pod-a/trainer: nvidia.com/gpu GPU-0, GPU-1 (replaced at 12:30 to span NUMA 0 and 1) and
  intel.com/sriov 0000:3b:02.0; the two responses set NVIDIA_DRIVER_CAPABILITIES differently.
- pod-b/worker: GPU-2, GPU-3 on NUMA 1 (a read-only mount); pod-b/sidecar: example.com/fpga
  fpga-0 without topology and without a response.
- pod-c/rogue: GPU-3 again — a double allocation.
- pod-d/init and pod-d/main: GPU-4 shared inside one pod (legitimate); main mounts read-write.
- pod-e/job: GPU-5 from 11:40 until it is deleted at 12:20.

Registered at 12:35: GPU-0 … GPU-6, 0000:3b:02.0 and .1, fpga-1 (fpga-0 is not registered).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from podstore import PodStore
from podstore.deviceplugin import ContainerAllocateResponse, DeviceSpec, Mount
from podstore.storage import events

DAY = datetime(2026, 12, 1, tzinfo=UTC)


def at(hhmm: str) -> datetime:
    hour, minute = (int(x) for x in hhmm.split(":"))
    return DAY.replace(hour=hour, minute=minute)


@contextmanager
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime]]:
    """Substitute the history clock; set ``now[0]`` to move it."""
    now = [DAY]
    with monkeypatch.context() as m:
        m.setattr(events, "utcnow", lambda: now[0])
        yield now


def _resp(
    envs: dict[str, str] | None = None,
    mounts: list[tuple[str, str, bool]] | None = None,
    devices: list[str] | None = None,
) -> ContainerAllocateResponse:
    msg = ContainerAllocateResponse(envs=envs or {})
    for c, h, ro in mounts or ():
        msg.mounts.append(Mount(container_path=c, host_path=h, read_only=ro))
    for d in devices or ():
        msg.devices.append(DeviceSpec(container_path=d, host_path=d, permissions="rw"))
    return msg


GPU_A = _resp(
    {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1", "NVIDIA_DRIVER_CAPABILITIES": "compute"},
    devices=["/dev/nvidia0", "/dev/nvidia1"],
)


def build(path: Path, monkeypatch: pytest.MonkeyPatch) -> PodStore:
    """Create the fixture store at ``path`` (returned open)."""
    store = PodStore.open(path)
    with clock(monkeypatch) as now:
        steps = [
            ("10:05", lambda: store.insert("pod-a", "trainer", "nvidia.com/gpu",
                                           {0: ["GPU-0", "GPU-1"]}, GPU_A)),
            ("10:06", lambda: store.insert(
                "pod-a", "trainer", "intel.com/sriov", {0: ["0000:3b:02.0"]},
                _resp({"PCIDEVICE_INTEL_COM_SRIOV": "0000:3b:02.0",
                       "NVIDIA_DRIVER_CAPABILITIES": "all"}))),
            ("10:30", lambda: store.insert(
                "pod-b", "worker", "nvidia.com/gpu", {1: ["GPU-2", "GPU-3"]},
                _resp({"NVIDIA_VISIBLE_DEVICES": "GPU-2,GPU-3"},
                      mounts=[("/usr/local/nvidia", "/opt/nvidia", True)]))),
            ("10:31", lambda: store.insert("pod-b", "sidecar", "example.com/fpga",
                                           {-1: ["fpga-0"]}, None)),
            ("11:10", lambda: store.insert("pod-c", "rogue", "nvidia.com/gpu", {1: ["GPU-3"]},
                                           _resp({"NVIDIA_VISIBLE_DEVICES": "GPU-3"}))),
            ("11:15", lambda: store.insert("pod-d", "init", "nvidia.com/gpu", {0: ["GPU-4"]},
                                           b"")),
            ("11:16", lambda: store.insert("pod-d", "main", "nvidia.com/gpu", {0: ["GPU-4"]},
                                           _resp(mounts=[("/data", "/mnt/data", False)]))),
            ("11:40", lambda: store.insert("pod-e", "job", "nvidia.com/gpu", {1: ["GPU-5"]},
                                           _resp({"NVIDIA_VISIBLE_DEVICES": "GPU-5"}))),
            ("12:20", lambda: store.delete(["pod-e"])),
            ("12:30", lambda: store.insert("pod-a", "trainer", "nvidia.com/gpu",
                                           {0: ["GPU-0"], 1: ["GPU-1"]}, GPU_A)),
            ("12:35", lambda: store.set_registered_devices({
                "nvidia.com/gpu": [f"GPU-{i}" for i in range(7)],
                "intel.com/sriov": ["0000:3b:02.0", "0000:3b:02.1"],
                "example.com/fpga": ["fpga-1"],
            })),
        ]  # fmt: skip
        for hhmm, step in steps:
            now[0] = at(hhmm)
            step()
    return store


def response_rows_consistent(path: Path) -> None:
    """Assert that the decoded response tables hold exactly what the stored alloc_resp bytes
    decode to (api.md's order: map keys sorted, lists in order), for every allocation."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        expected: dict[str, list[tuple[object, ...]]] = {
            t: []
            for t in (
                "response_envs",
                "response_mounts",
                "response_devices",
                "response_annotations",
                "response_cdi_devices",
            )
        }
        for aid, raw in conn.execute("SELECT id, alloc_resp FROM allocations ORDER BY id"):
            if not raw:
                continue
            msg = ContainerAllocateResponse()
            msg.ParseFromString(raw)
            expected["response_envs"] += [
                (aid, i, k, msg.envs[k]) for i, k in enumerate(sorted(msg.envs))
            ]
            expected["response_mounts"] += [
                (aid, i, m.container_path, m.host_path, int(m.read_only))
                for i, m in enumerate(msg.mounts)
            ]
            expected["response_devices"] += [
                (aid, i, d.container_path, d.host_path, d.permissions)
                for i, d in enumerate(msg.devices)
            ]
            expected["response_annotations"] += [
                (aid, i, k, msg.annotations[k]) for i, k in enumerate(sorted(msg.annotations))
            ]
            expected["response_cdi_devices"] += [
                (aid, i, c.name) for i, c in enumerate(msg.cdi_devices)
            ]
        for table, rows in expected.items():
            got = conn.execute(f"SELECT * FROM {table} ORDER BY allocation_id, position")
            assert [tuple(r) for r in got] == rows, table
    finally:
        conn.close()
