"""The CPU manager's state as items and rows.

Items: each assignment and the shared cpuset as sorted JSON arrays, the policy as a string.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from podstore.checkpoint import CPUManagerState
from podstore.storage.node import files
from podstore.storage.node.items import Item, Items, Key, Part, int_list, plain
from podstore.storage.sql import node as sql

KIND = FAMILY = "cpu"
RESOURCE = "cpu"
SHARED = "cpu:shared"
POLICY = "cpu:policy"
SHARED_KEY: Key = (None, None, SHARED)
POLICY_KEY: Key = (None, None, POLICY)


def cpus_item(cpus: frozenset[int]) -> Item:
    return int_list(sorted(cpus))


def wanted(state: CPUManagerState) -> tuple[Items, str, dict[str, Any]]:
    """The items, format and form of a CPU manager state."""
    items: Items = {}
    for pod, containers in state.entries.items():
        for name, cpus in containers.items():
            items[(pod, name, RESOURCE)] = cpus_item(cpus)
    for pod, cpus in state.pod_entries.items():
        items[(pod, None, RESOURCE)] = cpus_item(cpus)
    for container_id, cpus in state.legacy_entries.items():
        items[(None, container_id, RESOURCE)] = cpus_item(cpus)
    items[SHARED_KEY] = cpus_item(state.default_cpu_set)
    items[POLICY_KEY] = plain(state.policy_name)
    form = {
        "type_name": state.type_name,
        "empty_pods": sorted(pod for pod, containers in state.entries.items() if not containers),
    }
    if state.version == 4:
        # The shape of the copy beside ``data``, so that export writes the file back as read.
        form["legacy_copy"] = state.legacy_copy
    return items, f"v{state.version}", form


def _stored(conn: sqlite3.Connection) -> Items:
    found = files.get(conn, KIND)
    if found is None:
        return {}
    by_id: dict[int, tuple[Key, list[int]]] = {}
    for aid, pod, container, cpu in conn.execute(sql.CPU_ROWS):
        entry = by_id.setdefault(aid, ((pod, container, RESOURCE), []))
        if cpu is not None:
            entry[1].append(int(cpu))
    items: Items = {key: int_list(cpus) for key, cpus in by_id.values()}
    items[SHARED_KEY] = int_list([int(r[0]) for r in conn.execute(sql.CPU_SHARED)])
    items[POLICY_KEY] = plain(found.policy_name or "")
    return items


def _remove(conn: sqlite3.Connection, key: Key, item: Item) -> None:
    pod, container, resource = key
    if resource == RESOURCE:
        if pod is None:
            conn.execute(sql.CPU_DELETE_LEGACY, (container,))
        elif container is None:
            conn.execute(sql.CPU_DELETE_POD, (pod,))
        else:
            conn.execute(sql.CPU_DELETE_CONTAINER, (pod, container))
    elif resource == SHARED:
        conn.execute(sql.CPU_CLEAR_SHARED)


def _write(conn: sqlite3.Connection, key: Key, item: Item, old: Item | None) -> None:
    if old is not None:
        _remove(conn, key, old)
    pod, container, resource = key
    if resource == RESOURCE:
        aid = conn.execute(sql.CPU_INSERT, (pod, container)).lastrowid
        conn.executemany(sql.CPU_INSERT_CPU, [(aid, cpu) for cpu in item.value])
    elif resource == SHARED:
        conn.executemany(sql.CPU_INSERT_SHARED, [(cpu,) for cpu in item.value])
    elif resource == POLICY:
        files.set_policy(conn, KIND, item.value)


PART = Part(KIND, FAMILY, _stored, _remove, _write)


def read_state(conn: sqlite3.Connection) -> CPUManagerState | None:
    """The CPU manager state the store holds (None: no CPU manager checkpoint was loaded)."""
    found = files.get(conn, KIND)
    if found is None:
        return None
    entries: dict[str, dict[str, frozenset[int]]] = {
        pod: {} for pod in found.form.get("empty_pods", ())
    }
    pods: dict[str, frozenset[int]] = {}
    legacy: dict[str, frozenset[int]] = {}
    for (pod, container, _r), item in _stored(conn).items():
        if _r != RESOURCE:
            continue
        cpus = frozenset(item.value)
        if pod is None:
            assert container is not None
            legacy[container] = cpus
        elif container is None:
            pods[pod] = cpus
        else:
            entries.setdefault(pod, {})[container] = cpus
    shared = frozenset(int(r[0]) for r in conn.execute(sql.CPU_SHARED))
    return CPUManagerState(
        policy_name=found.policy_name or "",
        default_cpu_set=shared,
        entries=entries,
        pod_entries=pods,
        legacy_entries=legacy,
        version=int(found.version[1:]),
        type_name=str(found.form.get("type_name", "CPUManagerCheckpoint")),
        # Stores written before the shape was kept: the embedded v2 kubelet 1.37 writes.
        legacy_copy=str(found.form.get("legacy_copy", "v2")),
    )
