"""Fake nodes for the physical-device tests: cards named by CDI specs, reached through the
device plugin (responses with host paths or CDI names) and DRA (claims' CDI ids).

Card ``k`` is ``/dev/nvidiaK``; its CDI device ``nvidia.com/gpu=GPU-K``; MIG partition ``j``
of it ``nvidia.com/gpu=MIG-K-J`` with its own cap node beside the card's; the spec gives every
device the control nodes too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from podstore import PodDevicesEntry
from podstore.checkpoint import (
    FILE_NAMES,
    DRAClaim,
    DRADevice,
    DRAState,
    dumps_checkpoint,
    dumps_dra_state,
)
from podstore.deviceplugin import CDIDevice, ContainerAllocateResponse, DeviceSpec

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def card(k: int) -> str:
    return f"/dev/nvidia{k}"


def cap(k: int, j: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{10 * k + j}"


def pod(name: str) -> str:
    """A pod UID that reads as its role."""
    return f"{name}-0000-4000-8000-000000000000"


def spec(cards: int, migs: int = 2) -> dict[str, object]:
    """The CDI spec of ``cards`` GPUs with ``migs`` MIG partitions each."""
    devices: list[dict[str, object]] = []
    for k in range(cards):
        devices.append({"name": f"GPU-{k}", "containerEdits": {"deviceNodes": [{"path": card(k)}]}})
        for j in range(migs):
            devices.append(
                {
                    "name": f"MIG-{k}-{j}",
                    "containerEdits": {
                        "deviceNodes": [{"path": card(k)}, {"path": cap(k, j)}],
                    },
                }
            )
    return {
        "cdiVersion": "0.6.0",
        "kind": GPU,
        "devices": devices,
        "containerEdits": {"deviceNodes": [{"path": p} for p in CONTROL]},
    }


def response(host_paths: tuple[str, ...] = (), cdi: tuple[str, ...] = ()) -> bytes:
    msg = ContainerAllocateResponse(
        devices=[DeviceSpec(container_path=p, host_path=p, permissions="rw") for p in host_paths],
        cdi_devices=[CDIDevice(name=n) for n in cdi],
    )
    return msg.SerializeToString(deterministic=True)


def entry(
    pod_name: str,
    devices: list[str],
    resp: bytes = b"",
    resource: str = GPU,
    container: str = "main",
) -> PodDevicesEntry:
    return PodDevicesEntry(pod(pod_name), container, resource, {-1: devices}, resp)


def claim(
    name: str, pods: list[str], device: str, cdi: list[str], share_id: str | None = None
) -> DRAClaim:
    return DRAClaim(
        f"{name}-c1a1-4000-8000-000000000000",
        name,
        "default",
        frozenset(pod(p) for p in pods),
        {DRIVER: [DRADevice("pool", device, ["gpu"], cdi, share_id)]},
    )


@dataclass
class PhysicalNode:
    entries: list[PodDevicesEntry] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)
    claims: list[DRAClaim] = field(default_factory=list)
    cards: int = 8

    def write(self, root: Path) -> tuple[Path, Path]:
        """The kubelet directory and a CDI directory under ``root``."""
        kubelet = root / "kubelet"
        (kubelet / "device-plugins").mkdir(parents=True, exist_ok=True)
        (kubelet / FILE_NAMES["devices"]).write_bytes(
            dumps_checkpoint(self.entries, self.registered)
        )
        shares = any(d.share_id for c in self.claims for ds in c.driver_state.values() or []
                     for d in ds or [])  # fmt: skip
        (kubelet / FILE_NAMES["dra"]).write_bytes(
            dumps_dra_state(DRAState(self.claims, share_ids=shares))
        )
        cdi = root / "cdi"
        cdi.mkdir(exist_ok=True)
        (cdi / "nvidia.json").write_text(json.dumps(spec(self.cards)))
        return kubelet, cdi
