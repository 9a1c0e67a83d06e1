"""Fake nodes for the whole-node tests: a kubelet directory with the four checkpoint files, a
sysfs tree with the NUMA nodes' cpulists and a ``/var/log/pods`` tree, written from one
description so that a test knows what every view must say.

A :class:`Node` of N pods on ``numa`` NUMA nodes: pod i runs on NUMA node ``i % numa``; its
``main`` container holds two exclusive CPUs, a 1 GiB memory block and a GPU (device plugin)
there, and the pod has a DRA claim with one NIC. A pod in ``misaligned`` gets its GPU on the
next NUMA node instead. The CPU manager's shared pool is every CPU no container holds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from podstore import PodDevicesEntry
from podstore.checkpoint import (
    FILE_NAMES,
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
)

GIB = 1 << 30
GPU = "nvidia.com/gpu"
NIC = "nic.example.com"


def pod_uid(i: int) -> str:
    return f"{i:08x}-5e3a-4c2b-8d1f-{i * 2654435761 % (1 << 48):012x}"


def claim_uid(i: int) -> str:
    return f"{i:08x}-c1a1-4c2b-8d1f-{i * 40503 % (1 << 48):012x}"


@dataclass
class Node:
    pods: int
    numa: int = 2
    cpus_per_node: int = 0  # 0: enough for every pod, plus four shared
    misaligned: set[int] = field(default_factory=set)
    cpu_version: int = 4
    memory_version: int = 3

    def __post_init__(self) -> None:
        if not self.cpus_per_node:
            self.cpus_per_node = 2 * (-(-self.pods // self.numa)) + 4

    # ---- what the node holds ---------------------------------------------------------------

    def node_of(self, i: int) -> int:
        return i % self.numa

    def gpu_node_of(self, i: int) -> int:
        n = self.node_of(i)
        return (n + 1) % self.numa if i in self.misaligned else n

    def cpus_of(self, i: int) -> frozenset[int]:
        n = self.node_of(i)
        first = n * self.cpus_per_node + 4 + 2 * (i // self.numa)
        return frozenset({first, first + 1})

    def topology(self) -> dict[int, frozenset[int]]:
        size = self.cpus_per_node
        return {n: frozenset(range(n * size, (n + 1) * size)) for n in range(self.numa)}

    def name_of(self, i: int) -> tuple[str, str]:
        return f"team-{i % 3}", f"trainer-{i}"

    def cpu(self) -> CPUManagerState:
        held: set[int] = set()
        entries = {}
        for i in range(self.pods):
            entries[pod_uid(i)] = {"main": self.cpus_of(i)}
            held |= self.cpus_of(i)
        every = frozenset().union(*self.topology().values())
        return CPUManagerState("static", every - held, entries, version=self.cpu_version)

    def memory(self) -> MemoryManagerState:
        per_node = [
            sum(1 for i in range(self.pods) if self.node_of(i) == n) for n in range(self.numa)
        ]
        machine: dict[int, NUMANodeState | None] = {}
        for n in range(self.numa):
            total = max(64, per_node[n] + 2) * GIB  # room for every pod of a large node
            reserved = per_node[n] * GIB
            table = MemoryTable(total, GIB, total - GIB, reserved, total - GIB - reserved)
            machine[n] = NUMANodeState(per_node[n], {"memory": table}, [n])
        entries: dict[str, dict[str, list[MemoryBlock] | None] | None] = {
            pod_uid(i): {"main": [MemoryBlock([self.node_of(i)], "memory", GIB)]}
            for i in range(self.pods)
        }
        return MemoryManagerState("Static", machine, entries, version=self.memory_version)

    def dra(self) -> DRAState:
        return DRAState(
            [
                DRAClaim(
                    claim_uid(i),
                    f"nic-{i}",
                    self.name_of(i)[0],
                    frozenset({pod_uid(i)}),
                    {NIC: [DRADevice("pool-a", f"nic-{i}", ["nic"], [f"{NIC}/nic=nic-{i}"])]},
                )
                for i in range(self.pods)
            ]
        )

    def device_entries(self) -> list[PodDevicesEntry]:
        return [
            PodDevicesEntry(pod_uid(i), "main", GPU, {self.gpu_node_of(i): [f"GPU-{i}"]}, b"")
            for i in range(self.pods)
        ]

    # ---- on disk ---------------------------------------------------------------------------

    def write_kubelet_dir(
        self, root: Path, kinds: tuple[str, ...] = ("devices", "cpu", "memory", "dra")
    ) -> Path:
        data = {
            "devices": lambda: dumps_checkpoint(
                self.device_entries(), {GPU: [f"GPU-{i}" for i in range(self.pods)]}
            ),
            "cpu": lambda: dumps_cpu_state(self.cpu()),
            "memory": lambda: dumps_memory_state(self.memory()),
            "dra": lambda: dumps_dra_state(self.dra()),
        }
        for kind in kinds:
            path = root / FILE_NAMES[kind]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data[kind]())
        return root

    def write_sysfs(self, root: Path) -> Path:
        write_sysfs(root, self.topology())
        return root

    def write_pod_logs(self, root: Path) -> Path:
        root.mkdir(parents=True, exist_ok=True)
        for i in range(self.pods):
            namespace, name = self.name_of(i)
            (root / f"{namespace}_{name}_{pod_uid(i)}" / "main").mkdir(parents=True, exist_ok=True)
        return root

    def write_all(self, root: Path) -> tuple[Path, Path, Path]:
        """kubelet dir, sysfs and pod-logs trees under ``root``."""
        return (
            self.write_kubelet_dir(root / "kubelet"),
            self.write_sysfs(root / "sys"),
            self.write_pod_logs(root / "pods"),
        )


def write_sysfs(root: Path, nodes: dict[int, frozenset[int]]) -> None:
    from podstore.checkpoint import format_cpuset

    base = root / "devices" / "system" / "node"
    base.mkdir(parents=True, exist_ok=True)
    for n, cpus in nodes.items():
        d = base / f"node{n}"
        d.mkdir(exist_ok=True)
        (d / "cpulist").write_text(format_cpuset(cpus) + "\n")
    # What else a real tree holds there, which must be passed over.
    (base / "possible").write_text(f"0-{max(nodes) if nodes else 0}\n")


def replace_file(path: Path, data: bytes) -> None:
    """Rewrite ``path`` the way kubelet does: a new file renamed over the old one."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
