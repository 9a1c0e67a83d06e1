"""Kubelet's start-up checks that the checkpoint files and sysfs alone can answer (preflight).

Each check returns rows; a check that applies and passes returns one ``ok`` row, so the
operator sees what was checked (docs/kubelet-releases.md §6 lists kubelet's checks and words).
Checks that need kubelet's configuration (configured policy, reserved CPUs, reserved memory)
are not made: the files do not hold it.

Statuses: ``refuse`` (that release's manager fails to start), ``drop`` (it starts and loses
what the row names), ``warn`` (kubelet does not check it, but the state names what the node
lacks), ``ok``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from podstore.checkpoint.cpu_state import CPUManagerState
from podstore.checkpoint.cpuset import CPUSetError, format_cpuset, parse_cpuset
from podstore.checkpoint.decode import Checkpoint
from podstore.checkpoint.memory_state import MemoryManagerState
from podstore.checkpoint.topology import NODE_DIR

OK = "ok"
REFUSE = "refuse"
DROP = "drop"
WARN = "warn"

# Releases are minors of 1.N; None stands for "any" (every name any release knew).
_CPU_POLICIES = ("none", "static")
# The memory manager exists from 1.21; BestEffort (Windows affinity) from 1.32 (research §6.2).
_MEMORY_MANAGER_FROM = 21
_MEMORY_BEST_EFFORT_FROM = 32
# Pod-level CPU sets join the compared union from 1.36 (research §6.1).
_POD_LEVEL_FROM = 36


@dataclass(frozen=True)
class NodeCheck:
    """One row: ``check`` names the rule, ``kind`` the file's manager (cpu, memory, device)."""

    check: str
    kind: str
    status: str
    detail: str


def _q(cpus: frozenset[int]) -> str:
    return f'"{format_cpuset(cpus)}"'


def read_online_cpus(sysfs: str | os.PathLike[str]) -> frozenset[int] | str:
    """The online CPUs under the sysfs root, or why they cannot be read."""
    path = os.path.join(os.fspath(sysfs), "devices", "system", "cpu", "online")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64 * 1024).strip()
    except OSError as e:
        return f"cannot read {path}: {e.strerror or e}"
    try:
        return parse_cpuset(text)
    except CPUSetError as e:
        return f"bad cpu list in {path}: {e}"


def read_numa_nodes(sysfs: str | os.PathLike[str]) -> frozenset[int] | str:
    """The NUMA node ids under the sysfs root (``nodeN`` directories), or why not."""
    base = os.path.join(os.fspath(sysfs), "devices", "system", "node")
    try:
        names = os.listdir(base)
    except OSError as e:
        return f"cannot list {base}: {e.strerror or e}"
    return frozenset(int(m.group(1)) for n in names if (m := NODE_DIR.fullmatch(n)))


def cpu_checks(
    state: CPUManagerState,
    minor: int | None,
    sysfs: str | os.PathLike[str],
    *,
    pod_entries_kept: bool = True,
) -> list[NodeCheck]:
    """``policy``, ``empty-default``, ``overlap`` and ``cpuset-offline`` for the CPU file.
    ``pod_entries_kept``: False when the release drops ``podEntries`` on reading (the verdict's
    drops): their CPUs are then in no set kubelet compares with the online ones."""
    if state.policy_name not in _CPU_POLICIES:
        # kubelet stops at the policy mismatch before validating sets.
        return [
            NodeCheck(
                "policy",
                "cpu",
                REFUSE,
                f'unknown policy: "{state.policy_name}" (release knows none, static)',
            )
        ]
    rows = [NodeCheck("policy", "cpu", OK, f'policy "{state.policy_name}" is known')]
    online = read_online_cpus(sysfs)
    if state.policy_name != "static":
        rows.append(_offline_none(state, online))
        return rows
    assigned = [cpus for c in state.entries.values() for cpus in c.values()]
    if pod_entries_kept and (minor is None or minor >= _POD_LEVEL_FROM):
        assigned += list(state.pod_entries.values())
    default = state.default_cpu_set
    if not default:
        if assigned:
            rows.append(NodeCheck("empty-default", "cpu", REFUSE, "default cpuset cannot be empty"))
            return rows
        rows.append(NodeCheck("empty-default", "cpu", OK, "empty state: kubelet initialises it"))
        return rows
    rows.append(NodeCheck("empty-default", "cpu", OK, "default cpuset is not empty"))
    overlaps = [
        NodeCheck(
            "overlap",
            "cpu",
            REFUSE,
            f"pod: {pod}, container: {name} cpuset: {_q(cpus)} "
            f"overlaps with default cpuset {_q(default)}",
        )
        for pod, containers in sorted(state.entries.items())
        for name, cpus in sorted(containers.items())
        if cpus & default
    ]
    rows += overlaps or [NodeCheck("overlap", "cpu", OK, "no exclusive cpuset overlaps")]
    rows.append(_offline_static(default.union(*assigned), online))
    return rows


def _offline_static(in_state: frozenset[int], online: frozenset[int] | str) -> NodeCheck:
    if isinstance(online, str):
        return NodeCheck("cpuset-offline", "cpu", WARN, f"not checked: {online}")
    if in_state == online:
        return NodeCheck("cpuset-offline", "cpu", OK, f"state CPUs {_q(in_state)} are online")
    words = (
        f"current set of available CPUs {_q(online)} "
        f"doesn't match with CPUs in state {_q(in_state)}"
    )
    parts = []
    if in_state - online:
        parts.append(f"not online: {format_cpuset(in_state - online)}")
    if online - in_state:
        parts.append(f"online but not in state: {format_cpuset(online - in_state)}")
    return NodeCheck("cpuset-offline", "cpu", REFUSE, f"{words} ({'; '.join(parts)})")


def _offline_none(state: CPUManagerState, online: frozenset[int] | str) -> NodeCheck:
    named = state.default_cpu_set.union(
        *(c for cs in state.entries.values() for c in cs.values()), *state.pod_entries.values()
    )
    if isinstance(online, str):
        return NodeCheck("cpuset-offline", "cpu", WARN, f"not checked: {online}")
    if named - online:
        return NodeCheck(
            "cpuset-offline",
            "cpu",
            WARN,
            f"not online: {format_cpuset(named - online)} (policy none: kubelet does not check)",
        )
    return NodeCheck("cpuset-offline", "cpu", OK, "policy none: no cpuset names an offline CPU")


def memory_checks(
    state: MemoryManagerState, minor: int | None, sysfs: str | os.PathLike[str]
) -> list[NodeCheck]:
    """``policy``, ``empty-machine-state`` and ``numa`` for the memory file (none before 1.21:
    those releases have no memory manager and never read the file)."""
    if minor is not None and minor < _MEMORY_MANAGER_FROM:
        return []
    known = ["None", "Static"]
    if minor is None or minor >= _MEMORY_BEST_EFFORT_FROM:
        known.append("BestEffort")
    if state.policy_name not in known:
        return [
            NodeCheck(
                "policy",
                "memory",
                REFUSE,
                f'unknown policy: "{state.policy_name}" (release knows {", ".join(known)})',
            )
        ]
    rows = [NodeCheck("policy", "memory", OK, f'policy "{state.policy_name}" is known')]
    if state.policy_name != "Static":
        return rows
    blocks = [
        (pod, name, b)
        for pod, containers in sorted((state.entries or {}).items())
        for name, bs in sorted((containers or {}).items())
        for b in bs or []
    ]
    if not state.machine_state and blocks:
        why = "[memorymanager] machine state can not be empty when it has memory assignments"
        rows.append(NodeCheck("empty-machine-state", "memory", REFUSE, why))
        return rows
    nodes = read_numa_nodes(sysfs)
    if isinstance(nodes, str):
        rows.append(NodeCheck("numa", "memory", WARN, f"not checked: {nodes}"))
        return rows
    bad = [
        NodeCheck(
            "numa",
            "memory",
            REFUSE,
            f"[memorymanager] (pod: {pod}, container: {name}) the memory assignment uses the "
            f"NUMA that does not exist (NUMA {sorted(set(b.numa_affinity or []) - nodes)})",
        )
        for pod, name, b in blocks
        if set(b.numa_affinity or []) - nodes
    ]
    gone = sorted(set(state.machine_state or {}) - nodes)
    if gone:
        bad.append(
            NodeCheck(
                "numa",
                "memory",
                REFUSE,
                "[memorymanager] the expected machine state is different from the real one "
                f"(machine state names NUMA {gone}, not in sysfs)",
            )
        )
    return rows + (bad or [NodeCheck("numa", "memory", OK, "every NUMA node named exists")])


def device_checks(checkpoint: Checkpoint) -> list[NodeCheck]:
    """``no-response``: entries whose allocation response does not decode, which every release
    skips on restore (research §2.3), one row per pod."""
    from podstore.pure.alloc_resp import parse

    skipped: dict[str, list[str]] = {}
    for e in checkpoint.entries:
        if e.alloc_resp is not None and isinstance(parse(e.alloc_resp), str):
            skipped.setdefault(e.pod_uid, []).append(f"{e.container_name}/{e.resource_name}")
    if not skipped:
        return [NodeCheck("no-response", "devices", OK, "every allocation response decodes")]
    return [
        NodeCheck(
            "no-response",
            "devices",
            DROP,
            f"pod {pod}: {len(names)} entries skipped, allocation response does not decode "
            f"({', '.join(names)})",
        )
        for pod, names in sorted(skipped.items())
    ]
