"""Seeded, NVIDIA-like allocation workloads.

A pod has 1–3 containers; each container 1–2 resources (``nvidia.com/gpu`` from the NVIDIA
device plugin, ``nvidia.com/sriov_rdma`` from the SR-IOV network device plugin of NVIDIA's
network operator, as for GPUDirect RDMA); each (container, resource) entry 1–8 devices spread
over NUMA nodes 0 and 1, and a ``ContainerAllocateResponse`` shaped like those plugins' own
(``NVIDIA_VISIBLE_DEVICES`` and friends, ``/dev/nvidiaN`` device specs, a driver mount;
``PCIDEVICE_…`` and ``/dev/infiniband/…``), about 300 bytes on average. Device IDs are unique
per entry (GPU UUIDs; PCI addresses of virtual functions, random enough to
repeat only rarely), as on a node where a device is held
by one container at a time.

Generation is sequential from one ``random.Random(seed)``, pod by pod, so the workload of N pods
is a prefix of the workload of M > N pods.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from podstore import ContainerAllocateResponse, DeviceSpec, PodDevicesEntry
from podstore.deviceplugin import Mount

RESOURCES = ("nvidia.com/gpu", "nvidia.com/sriov_rdma")
CONTAINER_NAMES = ("main", "sidecar", "worker")
# Weights: most GPU pods have one container asking for one resource and few devices.
CONTAINER_WEIGHTS = (60, 30, 10)
RESOURCE_WEIGHTS = (75, 25)
DEVICE_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8)
DEVICE_WEIGHTS = (45, 25, 5, 12, 2, 2, 2, 7)
#: RegisteredDevices keeps this many healthy IDs per resource (a node's GPUs, not every ID).
REGISTERED_PER_RESOURCE = 16


@dataclass(frozen=True, slots=True)
class Allocation:
    """One container's allocation of one resource, as ``insert`` receives it."""

    pod_uid: str
    container_name: str
    resource_name: str
    devices: dict[int, list[str]]
    alloc_resp: ContainerAllocateResponse

    def entry(self) -> PodDevicesEntry:
        return PodDevicesEntry(
            self.pod_uid,
            self.container_name,
            self.resource_name,
            {node: list(ids) for node, ids in self.devices.items()},
            self.alloc_resp.SerializeToString(deterministic=True),
        )


@dataclass(slots=True)
class Workload:
    """The state of a node with ``pods`` pods."""

    pods: int
    allocations: list[Allocation]
    registered: dict[str, list[str]] = field(default_factory=dict)

    def entries(self) -> list[PodDevicesEntry]:
        return [a.entry() for a in self.allocations]

    def device_rows(self) -> int:
        return sum(len(ids) for a in self.allocations for ids in a.devices.values())

    def mean_alloc_resp_bytes(self) -> float:
        if not self.allocations:
            return 0.0
        return sum(a.alloc_resp.ByteSize() for a in self.allocations) / len(self.allocations)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def alloc_resp(
    resource: str, ids: list[str], minors: list[int], rng: random.Random
) -> ContainerAllocateResponse:
    """A device plugin response for ``ids`` (``minors``: /dev/nvidiaN or uverbsN numbers)."""
    msg = ContainerAllocateResponse()
    if resource == "nvidia.com/gpu":
        msg.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
        msg.envs["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
        if rng.random() < 0.2:
            msg.envs["NVIDIA_REQUIRE_CUDA"] = "cuda>=12.2"
        shared = ["/dev/nvidiactl"]
        if rng.random() < 0.4:
            shared.append("/dev/nvidia-uvm")
        paths = shared + [f"/dev/nvidia{m}" for m in minors]
        if rng.random() < 0.25:
            msg.mounts.append(
                Mount(
                    container_path="/usr/bin/nvidia-smi",
                    host_path="/usr/bin/nvidia-smi",
                    read_only=True,
                )
            )
            # A plugin that mounts host tools also names its CDI devices in an annotation
            # (the "cdi-annotations" strategy); no extra random draw, so every other figure
            # of the workload stays as it was.
            msg.annotations[f"cdi.k8s.io/nvidia-device-plugin_{ids[0]}"] = ",".join(
                f"nvidia.com/gpu={i}" for i in ids
            )
    else:
        msg.envs["PCIDEVICE_NVIDIA_COM_SRIOV_RDMA"] = ",".join(ids)
        paths = ["/dev/infiniband/rdma_cm"] + [f"/dev/infiniband/uverbs{m}" for m in minors]
    for path in paths:
        msg.devices.append(DeviceSpec(container_path=path, host_path=path, permissions="rw"))
    return msg


def allocation(rng: random.Random, pod_uid: str, container: str, resource: str) -> Allocation:
    """One entry: 1–8 fresh device IDs, each on NUMA node 0 or 1."""
    count = rng.choices(DEVICE_COUNTS, DEVICE_WEIGHTS)[0]
    if resource == "nvidia.com/gpu":
        ids = ["GPU-" + _uuid(rng) for _ in range(count)]
    else:
        # PCI addresses (domain:bus:device.function) of virtual functions.
        ids = []
        for _ in range(count):
            bits = rng.getrandbits(32)
            ids.append(
                f"{bits >> 16:04x}:{(bits >> 8) & 0xFF:02x}:{(bits >> 3) & 0x1F:02x}.{bits & 7}"
            )
    per_numa: dict[int, list[str]] = {}
    for dev in ids:
        per_numa.setdefault(rng.randrange(2), []).append(dev)
    minors = sorted(rng.sample(range(64), count))
    return Allocation(
        pod_uid,
        container,
        resource,
        dict(sorted(per_numa.items())),
        alloc_resp(resource, ids, minors, rng),
    )


def pod_allocations(rng: random.Random) -> Iterator[Allocation]:
    """Every entry of one new pod."""
    uid = _uuid(rng)
    containers = rng.choices((1, 2, 3), CONTAINER_WEIGHTS)[0]
    for name in CONTAINER_NAMES[:containers]:
        resources = rng.choices((1, 2), RESOURCE_WEIGHTS)[0]
        chosen = RESOURCES[:resources] if resources == 2 else (rng.choice(RESOURCES),)
        for resource in chosen:
            yield allocation(rng, uid, name, resource)


def registered_for(allocations: list[Allocation]) -> dict[str, list[str]]:
    """RegisteredDevices for a state: the first healthy IDs seen, per resource."""
    registered: dict[str, list[str]] = {r: [] for r in RESOURCES}
    for a in allocations:
        healthy = registered[a.resource_name]
        if len(healthy) >= REGISTERED_PER_RESOURCE:
            continue
        for ids in a.devices.values():
            healthy.extend(ids[: REGISTERED_PER_RESOURCE - len(healthy)])
    return registered


def generate(pods: int, seed: int) -> Workload:
    """The state of a node with ``pods`` pods (deterministic for a seed)."""
    rng = random.Random(seed)
    allocations = [a for _ in range(pods) for a in pod_allocations(rng)]
    return Workload(pods, allocations, registered_for(allocations))


def fresh_allocations(count: int, seed: int) -> list[Allocation]:
    """Allocations of pods not in any workload: what the insert benchmark writes."""
    rng = random.Random(seed ^ 0x5EED)
    return [
        allocation(rng, f"bench-{i:06d}-{_uuid(rng)[:8]}", "main", "nvidia.com/gpu")
        for i in range(count)
    ]
