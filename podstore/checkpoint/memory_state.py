"""Kubelet's memory manager checkpoint (``memory_manager_state``), read and written as kubelet
does: v1–v3 by shape and checksum (docs/node-files.md), a file with ``data`` as v3 only.

The machine state's map values are pointers, rendered ``<*>{…}`` when hashed; v1 also verifies
under its versioned type name (one kubelet's rule). Nil stays apart from empty (``None``), so
a file kubelet wrote is written back byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.files import DEFAULT_MAX_BYTES
from podstore.checkpoint.goencode import to_json
from podstore.checkpoint.gotypes import (
    CHECKSUM,
    INT,
    STRING,
    UINT64,
    Field,
    String,
    Struct,
    map_of,
    ptr,
    slice_of,
)
from podstore.checkpoint.values import utf8_text as _text
from podstore.checkpoint.versions import (
    DATA_FIELDS,
    Layout,
    first_verified,
    has_key,
    read_data_format,
    read_tree,
    spew_rule,
    string_field,
    uint_field,
)
from podstore.errors import InvalidInputError

#: The file's name in kubelet's root directory.
FILE_NAME = "memory_manager_state"
#: The version kubelet writes today.
CURRENT_VERSION = 3
_TYPE_NAME = "MemoryManagerCheckpoint"
_UINT64_MAX = (1 << 64) - 1
_INT64 = range(-(1 << 63), 1 << 63)


@dataclass
class MemoryTable:
    """One memory type of one NUMA node, in bytes."""

    total: int = 0
    system_reserved: int = 0
    allocatable: int = 0
    reserved: int = 0
    free: int = 0


@dataclass
class NUMANodeState:
    """A NUMA node of the machine state: how many assignments use it, a table per memory
    type (``"memory"``, ``"hugepages-1Gi"``, …), and the NUMA nodes it is grouped with."""

    number_of_assignments: int = 0
    memory_map: dict[str, MemoryTable | None] | None = field(default_factory=dict)
    cells: list[int] | None = field(default_factory=list)


@dataclass
class MemoryBlock:
    """Memory of one type, ``size`` bytes, taken from the NUMA nodes ``numa_affinity``."""

    numa_affinity: list[int] | None
    type: str
    size: int


Blocks = list[MemoryBlock] | None


@dataclass
class MemoryManagerState:
    """A verified ``memory_manager_state``: ``machine_state`` by NUMA node, ``entries`` pod →
    container → blocks, ``pod_entries`` (v2, v3) pod → blocks. ``checksum``: the stored one
    (``dataChecksum`` for v3); ``verified`` is false for a stored 0 accepted unverified.
    """

    policy_name: str
    machine_state: dict[int, NUMANodeState | None] | None = field(default_factory=dict)
    entries: dict[str, dict[str, Blocks] | None] | None = field(default_factory=dict)
    pod_entries: dict[str, Blocks] | None = field(default_factory=dict)
    version: int = CURRENT_VERSION
    checksum: int = 0
    verified: bool = True


# -- Go types -----------------------------------------------------------------------------------

_RESOURCE_NAME = String("v1.ResourceName")
_TABLE = Struct(
    "state.MemoryTable",
    (
        Field("TotalMemSize", UINT64, "total"),
        Field("SystemReserved", UINT64, "systemReserved"),
        Field("Allocatable", UINT64, "allocatable"),
        Field("Reserved", UINT64, "reserved"),
        Field("Free", UINT64, "free"),
    ),
)
_NODE = Struct(
    "state.NUMANodeState",
    (
        Field("NumberOfAssignments", INT, "numberOfAssignments"),
        Field("MemoryMap", map_of(_RESOURCE_NAME, ptr(_TABLE)), "memoryMap"),
        Field("Cells", slice_of(INT), "cells"),
    ),
)
_NODE_MAP = map_of(INT, ptr(_NODE), "state.NUMANodeMap")
_BLOCK = Struct(
    "state.Block",
    (
        Field("NUMAAffinity", slice_of(INT), "numaAffinity"),
        Field("Type", _RESOURCE_NAME, "type"),
        Field("Size", UINT64, "size"),
    ),
)
_BLOCKS = slice_of(_BLOCK)
_ENTRIES = map_of(STRING, map_of(STRING, _BLOCKS), "state.ContainerMemoryAssignments")
_POD_ENTRY = Struct("state.PodEntry", (Field("MemoryBlocks", _BLOCKS, "memoryBlocks", True),))
_POD_ENTRIES = map_of(STRING, _POD_ENTRY, "state.PodMemoryAssignments")

_POLICY = Field("PolicyName", STRING, "policyName")
_MACHINE = Field("MachineState", _NODE_MAP, "machineState")
_ENTRIES_FIELD = Field("Entries", _ENTRIES, "entries", True)
_POD_ENTRIES_FIELD = Field("PodEntries", _POD_ENTRIES, "podEntries", True)
_CHECKSUM = Field("Checksum", CHECKSUM, "checksum")

V1 = Struct("state.MemoryManagerCheckpointV1", (_POLICY, _MACHINE, _ENTRIES_FIELD, _CHECKSUM))
V2 = Struct(
    "state.MemoryManagerCheckpointV2",
    (_POLICY, _MACHINE, _ENTRIES_FIELD, _POD_ENTRIES_FIELD, _CHECKSUM),
)
DATA = Struct(
    "state.MemoryManagerCheckpointData", (_POLICY, _MACHINE, _ENTRIES_FIELD, _POD_ENTRIES_FIELD)
)
V3 = Struct(
    "state.MemoryManagerCheckpoint", (_POLICY, _MACHINE, _ENTRIES_FIELD, _CHECKSUM, *DATA_FIELDS)
)


# Kubelet pre-initialises the maps before decoding (a missing key hashes as map[]).
_LAYOUTS = (
    Layout(
        "v2",
        V2,
        lambda: ["", {}, {}, {}, 0],
        (spew_rule(V2, _TYPE_NAME),),
        fits=lambda tree: has_key(tree, "PODENTRIES"),
    ),
    Layout(
        "v1",
        V1,
        lambda: ["", {}, {}, 0],
        (spew_rule(V1, _TYPE_NAME), spew_rule(V1, "MemoryManagerCheckpointV1")),
        accepts_zero=True,
        # v1 is v2 without podEntries, which it ignores.
        from_newer=lambda v2: [v2[0], v2[1], v2[2], v2[4]],
    ),
)


# -- reading ------------------------------------------------------------------------------------


@collector_paused()
def read_memory_state(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> MemoryManagerState:
    """Read and verify a ``memory_manager_state`` from a path or from the file's bytes.

    Raises the errors of :func:`podstore.checkpoint.read_cpu_state`, for this file.
    """
    return memory_state_from_tree(*read_tree(source, max_bytes))


@collector_paused()
def memory_state_from_tree(tree: Any, origin: str = "") -> MemoryManagerState:
    """:func:`read_memory_state` of a document parsed by :func:`.gojson.parse`."""
    if string_field(tree, "DATA") or uint_field(tree, "DATACHECKSUM"):
        return _read_v3(tree, origin)
    found = first_verified(tree, _LAYOUTS, "memory manager", origin)
    value = found.value
    v2 = found.layout.label == "v2"
    return MemoryManagerState(
        policy_name=value[0],
        machine_state=_machine(value[1]),
        entries=_entries(value[2]),
        pod_entries=_pod_entries(value[3]) if v2 else {},
        version=2 if v2 else 1,
        checksum=found.checksum,
        verified=found.rule is not None,
    )


_V3_LAYOUT = Layout("v3", V3, lambda: ["", {}, {}, 0, "", 0], ())
_DATA_LAYOUT = Layout("v3 data", DATA, lambda: ["", {}, {}, {}], ())


def _read_v3(tree: Any, origin: str) -> MemoryManagerState:
    inner, stored = read_data_format(tree, _V3_LAYOUT, _DATA_LAYOUT, "memory manager", origin)
    return MemoryManagerState(
        policy_name=inner[0],
        machine_state=_machine(inner[1]),
        entries=_entries(inner[2]),
        pod_entries=_pod_entries(inner[3]),
        version=3,
        checksum=stored,
    )


def _machine(v: dict[int, Any] | None) -> dict[int, NUMANodeState | None] | None:
    if v is None:
        return None
    out: dict[int, NUMANodeState | None] = {}
    for node, state in v.items():
        if state is None:
            out[node] = None
            continue
        count, memory_map, cells = state
        tables = None
        if memory_map is not None:
            tables = {k: None if t is None else MemoryTable(*t) for k, t in memory_map.items()}
        out[node] = NUMANodeState(count, tables, cells)
    return out


def _blocks(v: list[list[Any]] | None) -> Blocks:
    return None if v is None else [MemoryBlock(*b) for b in v]


def _entries(v: dict[str, Any] | None) -> dict[str, dict[str, Blocks] | None] | None:
    if v is None:
        return None
    return {
        pod: None if containers is None else {c: _blocks(b) for c, b in containers.items()}
        for pod, containers in v.items()
    }


def _pod_entries(v: dict[str, list[Any]] | None) -> dict[str, Blocks] | None:
    if v is None:
        return None
    return {pod: _blocks(entry[0]) for pod, entry in v.items()}


# -- writing ------------------------------------------------------------------------------------


@collector_paused()
def dumps_memory_state(state: MemoryManagerState) -> bytes:
    """The bytes kubelet writes for ``state`` in ``state.version`` (1–3), checksum included
    (v3: ``data`` and ``dataChecksum`` beside a v1 copy, as kubelet writes it).

    Raises :class:`InvalidInputError` for values of the wrong type or range, or pod entries in
    v1.
    """
    version = state.version
    if version not in (1, 2, 3):
        raise InvalidInputError(f"version must be 1, 2 or 3, not {version!r}")
    policy = _text(state.policy_name, "policy_name")
    machine = _go_machine(state.machine_state)
    # omitempty writes nil and empty alike, read back as empty: the checksum covers that.
    entries = _go_entries(state.entries) or {}
    pods = _go_pod_entries(state.pod_entries) or {}
    if version == 1 and pods:
        raise InvalidInputError("pod_entries need version 2 or 3 (v1 has no podEntries)")
    if version == 2:
        value = [policy, machine, entries, pods, 0]
        value[-1] = spew.checksum_value(V2, value, [("MemoryManagerCheckpointV2", _TYPE_NAME)])
        return gojson.encode(to_json(V2, value))
    v1 = [policy, machine, entries, 0]
    v1[-1] = spew.checksum_value(V1, v1, [("MemoryManagerCheckpointV1", _TYPE_NAME)])
    if version == 1:
        return gojson.encode(to_json(V1, v1))
    data = gojson.encode(to_json(DATA, [policy, machine, entries, pods])).decode("utf-8")
    return gojson.encode(to_json(V3, [*v1, data, spew.checksum_string(data)]))


def _number(value: object, where: str, unsigned: bool) -> int:
    ok = type(value) is int and (0 <= value <= _UINT64_MAX if unsigned else value in _INT64)
    if not ok:
        kind = "a uint64" if unsigned else "an int64"
        raise InvalidInputError(f"{where} must be {kind}, not {value!r}")
    return value  # type: ignore[return-value]


def _ints(value: object, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{where} must be a list of ints or None")
    return [_number(x, f"{where}[{i}]", False) for i, x in enumerate(value)]


def _mapping(value: object, where: str) -> dict[Any, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where} must be a dict or None, not {type(value).__name__}")
    return value


def _go_machine(machine: object) -> dict[int, Any] | None:
    nodes = _mapping(machine, "machine_state")
    if nodes is None:
        return None
    out: dict[int, Any] = {}
    for node, state in nodes.items():
        where = f"machine_state[{node!r}]"
        _number(node, f"machine_state key {node!r}", False)
        if state is None:
            out[node] = None
            continue
        if not isinstance(state, NUMANodeState):
            raise InvalidInputError(f"{where} must be a NUMANodeState or None")
        tables = _mapping(state.memory_map, f"{where}.memory_map")
        go_tables: dict[str, Any] | None = None
        if tables is not None:
            go_tables = {}
            for kind, table in tables.items():
                _text(kind, f"{where}.memory_map key")
                if table is None:
                    go_tables[kind] = None
                elif isinstance(table, MemoryTable):
                    go_tables[kind] = [
                        _number(getattr(table, name), f"{where}.memory_map[{kind!r}].{name}", True)
                        for name in ("total", "system_reserved", "allocatable", "reserved", "free")
                    ]
                else:
                    raise InvalidInputError(f"{where}.memory_map[{kind!r}] must be a MemoryTable")
        out[node] = [
            _number(state.number_of_assignments, f"{where}.number_of_assignments", False),
            go_tables,
            _ints(state.cells, f"{where}.cells"),
        ]
    return out


def _go_blocks(blocks: object, where: str) -> list[list[Any]] | None:
    if blocks is None:
        return None
    if not isinstance(blocks, list | tuple):
        raise InvalidInputError(f"{where} must be a list of MemoryBlock or None")
    out = []
    for i, b in enumerate(blocks):
        if not isinstance(b, MemoryBlock):
            raise InvalidInputError(f"{where}[{i}] must be a MemoryBlock")
        out.append(
            [
                _ints(b.numa_affinity, f"{where}[{i}].numa_affinity"),
                _text(b.type, f"{where}[{i}].type"),
                _number(b.size, f"{where}[{i}].size", True),
            ]
        )
    return out


def _go_entries(entries: object) -> dict[str, Any] | None:
    pods = _mapping(entries, "entries")
    if pods is None:
        return None
    out: dict[str, Any] = {}
    for pod, containers in pods.items():
        where = f"entries[{_text(pod, 'entries key')!r}]"
        inner = _mapping(containers, where)
        out[pod] = (
            None
            if inner is None
            else {
                _text(c, f"{where} key"): _go_blocks(b, f"{where}[{c!r}]") for c, b in inner.items()
            }
        )
    return out


def _go_pod_entries(pod_entries: object) -> dict[str, Any] | None:
    pods = _mapping(pod_entries, "pod_entries")
    if pods is None:
        return None
    # A pod's blocks are omitempty too: empty ones are written as nothing and read back nil.
    return {
        _text(pod, "pod_entries key"): [_go_blocks(b, f"pod_entries[{pod!r}]") or None]
        for pod, b in pods.items()
    }
