"""The node's NUMA topology from sysfs (``devices/system/node/nodeN/cpulist``; docs/node-files.md).

A root without ``devices/system`` is no sysfs (:func:`is_sysfs`: a mistyped path), and callers
keep what they stored.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from podstore.checkpoint.cpuset import CPUSetError, parse_cpuset

#: Where sysfs is mounted on a node.
DEFAULT_SYSFS = "/sys"
NODE_DIR = re.compile(r"node(0|[1-9][0-9]{0,5})")
# A cpulist is a few hundred bytes at most; anything much longer is not one.
_MAX_CPULIST_BYTES = 64 * 1024


@dataclass(frozen=True)
class NumaTopology:
    """NUMA node id → its CPUs; ``skipped`` names the entries that were ignored and why."""

    nodes: dict[int, frozenset[int]]
    skipped: tuple[str, ...] = ()

    def cpu_nodes(self) -> dict[int, int]:
        """CPU id → the NUMA node it belongs to."""
        return {cpu: node for node in sorted(self.nodes) for cpu in sorted(self.nodes[node])}

    def node_of(self, cpu: int) -> int | None:
        """The NUMA node of a CPU (``None``: the CPU is in no node's list)."""
        for node in sorted(self.nodes):
            if cpu in self.nodes[node]:
                return node
        return None


def is_sysfs(sysfs: str | os.PathLike[str] = DEFAULT_SYSFS) -> bool:
    """Whether ``sysfs`` is a sysfs root: every Linux sysfs has ``devices/system``, with or
    without NUMA nodes under it."""
    return os.path.isdir(os.path.join(os.fspath(sysfs), "devices", "system"))


def read_numa_topology(sysfs: str | os.PathLike[str] = DEFAULT_SYSFS) -> NumaTopology | None:
    """The NUMA topology under the sysfs root (``None``: no node listed, or unreadable); never
    raises for the tree's content. A CPU listed twice stays with the lower node id."""
    base = os.path.join(os.fspath(sysfs), "devices", "system", "node")
    try:
        with os.scandir(base) as it:
            names = sorted(e.name for e in it)
    except OSError:
        return None
    nodes: dict[int, frozenset[int]] = {}
    skipped: list[str] = []
    owner: dict[int, int] = {}
    candidates = []
    for name in names:
        m = NODE_DIR.fullmatch(name)
        if m is None:
            if name.startswith("node"):
                skipped.append(f"{name}: not a node directory name")
            continue
        candidates.append((int(m.group(1)), name))
    for node, name in sorted(candidates):
        path = os.path.join(base, name, "cpulist")
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_CPULIST_BYTES + 1)
        except OSError as e:
            skipped.append(f"{name}: cannot read cpulist: {e.strerror or e}")
            continue
        if len(raw) > _MAX_CPULIST_BYTES:
            skipped.append(f"{name}: cpulist longer than {_MAX_CPULIST_BYTES} bytes")
            continue
        try:
            cpus = parse_cpuset(raw.decode("ascii").strip())
        except (UnicodeDecodeError, CPUSetError) as e:
            reason = "not ASCII" if isinstance(e, UnicodeDecodeError) else str(e)
            skipped.append(f"{name}: bad cpulist: {reason}")
            continue
        taken = sorted(cpu for cpu in cpus if cpu in owner)
        if taken:
            skipped.append(f"{name}: CPUs {taken} already listed by another node, left there")
            cpus = cpus.difference(taken)
        for cpu in cpus:
            owner[cpu] = node
        nodes[node] = cpus
    if not nodes:
        return None
    return NumaTopology(nodes, tuple(skipped))
