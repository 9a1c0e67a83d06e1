"""The memory manager's state as items and rows.

Items: each assignment's blocks and each NUMA node of the machine state as kubelet writes
them, and the policy; blocks compare as a multiset.
"""

from __future__ import annotations

import json
import sqlite3
from json.encoder import encode_basestring
from typing import Any

from podstore.checkpoint import MemoryBlock, MemoryManagerState, MemoryTable, NUMANodeState
from podstore.storage.node import files
from podstore.storage.node.items import Item, Items, Key, Part, check_integer, dumps, plain
from podstore.storage.sql import node as sql

KIND = FAMILY = "memory"
RESOURCE = "memory"
POLICY = "memory:policy"
NUMA_PREFIX = "memory:numa:"
POLICY_KEY: Key = (None, None, POLICY)

Blocks = list[MemoryBlock] | None


def _block_text(affinity: list[int] | None, b: MemoryBlock) -> str:
    """A block as :func:`dumps` writes ``{"numaAffinity","type","size"}``, made faster (a
    1,000-pod memory file has thousands)."""
    numa = "null" if affinity is None else "[" + ",".join(map(str, affinity)) + "]"
    return f'{{"numaAffinity":{numa},"type":{encode_basestring(b.type)},"size":{b.size}}}'


def _sorted(values: list[int] | None) -> list[int] | None:
    return None if values is None else sorted(values)


def blocks_item(blocks: Blocks, where: str) -> Item:
    if blocks is None:
        return Item("null", "null", None)
    listed = []
    canon = []
    for i, b in enumerate(blocks):
        check_integer(b.size, f"{where}[{i}].size")
        listed.append(_block_text(b.numa_affinity, b))
        canon.append(_block_text(_sorted(b.numa_affinity), b))
    canon.sort()
    return Item("[" + ",".join(listed) + "]", "[" + ",".join(canon) + "]", blocks)


_TABLE_FIELDS = ("total", "systemReserved", "allocatable", "reserved", "free")


def _table_json(t: MemoryTable | None, where: str) -> dict[str, int] | None:
    if t is None:
        return None
    values = (t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
    for name, value in zip(_TABLE_FIELDS, values, strict=True):
        check_integer(value, f"{where}.{name}")
    return dict(zip(_TABLE_FIELDS, values, strict=True))


def _table_row(t: MemoryTable | None) -> tuple[bool, int, int, int, int, int]:
    if t is None:
        return (True, 0, 0, 0, 0, 0)
    return (False, t.total, t.system_reserved, t.allocatable, t.reserved, t.free)


def node_item(node: NUMANodeState | None, where: str) -> Item:
    if node is None:
        return Item("null", "null", None)
    memory_map = (
        None
        if node.memory_map is None
        else {
            t: _table_json(table, f"{where}.memoryMap[{t!r}]")
            for t, table in sorted(node.memory_map.items())
        }
    )
    shown = {
        "numberOfAssignments": node.number_of_assignments,
        "memoryMap": memory_map,
        "cells": node.cells,
    }
    canon = {**shown, "cells": _sorted(node.cells)}
    return Item(dumps(shown), dumps(canon), node)


def wanted(state: MemoryManagerState) -> tuple[Items, str, dict[str, Any]]:
    """The items, format and form of a memory manager state."""
    items: Items = {}
    for pod, containers in (state.entries or {}).items():
        for name, blocks in (containers or {}).items():
            items[(pod, name, RESOURCE)] = blocks_item(blocks, f"entries[{pod!r}][{name!r}]")
    for pod, blocks in (state.pod_entries or {}).items():
        items[(pod, None, RESOURCE)] = blocks_item(blocks, f"podEntries[{pod!r}]")
    for numa, node in (state.machine_state or {}).items():
        items[(None, None, f"{NUMA_PREFIX}{numa}")] = node_item(node, f"machineState[{numa}]")
    items[POLICY_KEY] = plain(state.policy_name)
    entries = state.entries or {}
    form = {
        "machine_state_null": state.machine_state is None,
        "entries_null": state.entries is None,
        "pod_entries_null": state.pod_entries is None,
        "null_pods": sorted(p for p, c in entries.items() if c is None),
        "empty_pods": sorted(p for p, c in entries.items() if c is not None and not c),
    }
    return items, f"v{state.version}", form


def _assignments(conn: sqlite3.Connection) -> dict[Key, Blocks]:
    out: dict[Key, Blocks] = {}
    blocks: dict[tuple[int, int], MemoryBlock] = {}
    for aid, pod, container, null, pos, mtype, size, affinity_null, numa in conn.execute(
        sql.MEMORY_ROWS
    ):
        key = (pod, container, RESOURCE)
        if key not in out:
            out[key] = None if null else []
        if pos is None:
            continue
        block = blocks.get((aid, pos))
        if block is None:
            block = blocks[(aid, pos)] = MemoryBlock(
                None if affinity_null else [], str(mtype), int(size)
            )
            listed = out[key]
            assert listed is not None
            listed.append(block)
        if numa is not None:
            assert block.numa_affinity is not None
            block.numa_affinity.append(int(numa))
    return out


def _machine(conn: sqlite3.Connection) -> dict[int, NUMANodeState | None]:
    out: dict[int, NUMANodeState | None] = {}
    for row in conn.execute(sql.MACHINE_ROWS):
        numa, state_null, count, map_null, cells = row[:5]
        numa = int(numa)
        if numa not in out:
            out[numa] = (
                None
                if state_null
                else NUMANodeState(
                    int(count),
                    None if map_null else {},
                    None if cells is None else json.loads(cells),
                )
            )
        node = out[numa]
        mtype = row[5]
        if node is None or mtype is None:
            continue
        assert node.memory_map is not None
        node.memory_map[str(mtype)] = None if row[6] else MemoryTable(*(int(v) for v in row[7:]))
    return out


def _stored(conn: sqlite3.Connection) -> Items:
    found = files.get(conn, KIND)
    if found is None:
        return {}
    items: Items = {key: blocks_item(b, "") for key, b in _assignments(conn).items()}
    for numa, node in _machine(conn).items():
        items[(None, None, f"{NUMA_PREFIX}{numa}")] = node_item(node, "")
    items[POLICY_KEY] = plain(found.policy_name or "")
    return items


def _remove(conn: sqlite3.Connection, key: Key, item: Item) -> None:
    pod, container, resource = key
    if resource == RESOURCE:
        if container is None:
            conn.execute(sql.MEMORY_DELETE_POD, (pod,))
        else:
            conn.execute(sql.MEMORY_DELETE_CONTAINER, (pod, container))
    elif resource.startswith(NUMA_PREFIX):
        conn.execute(sql.MACHINE_DELETE_NODE, (int(resource[len(NUMA_PREFIX) :]),))


def _write(conn: sqlite3.Connection, key: Key, item: Item, old: Item | None) -> None:
    if old is not None:
        _remove(conn, key, old)
    pod, container, resource = key
    if resource == RESOURCE:
        blocks: Blocks = item.value
        aid = conn.execute(sql.MEMORY_INSERT, (pod, container, blocks is None)).lastrowid
        assert aid is not None
        numa_rows: list[tuple[int, int, int, int]] = []
        for pos, b in enumerate(blocks or ()):
            conn.execute(
                sql.MEMORY_INSERT_BLOCK, (aid, pos, b.type, b.size, b.numa_affinity is None)
            )
            numa_rows.extend((aid, pos, i, n) for i, n in enumerate(b.numa_affinity or ()))
        conn.executemany(sql.MEMORY_INSERT_NUMA, numa_rows)
    elif resource.startswith(NUMA_PREFIX):
        numa = int(resource[len(NUMA_PREFIX) :])
        node: NUMANodeState | None = item.value
        if node is None:
            conn.execute(sql.MACHINE_INSERT_NODE, (numa, True, 0, False, None))
            return
        cells = None if node.cells is None else dumps(node.cells)
        conn.execute(
            sql.MACHINE_INSERT_NODE,
            (numa, False, node.number_of_assignments, node.memory_map is None, cells),
        )
        conn.executemany(
            sql.MACHINE_INSERT_TABLE,
            [(numa, mtype, *_table_row(t)) for mtype, t in (node.memory_map or {}).items()],
        )
    elif resource == POLICY:
        files.set_policy(conn, KIND, item.value)


PART = Part(KIND, FAMILY, _stored, _remove, _write)


def read_state(conn: sqlite3.Connection) -> MemoryManagerState | None:
    """The memory manager state the store holds (None: none was loaded)."""
    found = files.get(conn, KIND)
    if found is None:
        return None
    form = found.form
    entries: dict[str, dict[str, Blocks] | None] = {p: None for p in form.get("null_pods", ())}
    entries.update({p: {} for p in form.get("empty_pods", ())})
    pods: dict[str, Blocks] = {}
    for (pod, container, _r), blocks in _assignments(conn).items():
        assert pod is not None
        if container is None:
            pods[pod] = blocks
        else:
            inner = entries.get(pod)
            if inner is None:
                inner = entries[pod] = {}
            inner[container] = blocks
    machine = _machine(conn)
    return MemoryManagerState(
        policy_name=found.policy_name or "",
        machine_state=None if form.get("machine_state_null") and not machine else machine,
        entries=None if form.get("entries_null") and not entries else entries,
        pod_entries=None if form.get("pod_entries_null") and not pods else pods,
        version=int(found.version[1:]),
    )
