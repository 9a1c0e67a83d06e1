"""Writing allocation entries: one at a time (insert) and in bulk (restore and import).

Both run inside a transaction the caller opened; both give the same result for the same
entries, which the state-machine test checks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podstore import history, responses
from podstore import queries as q
from podstore.types import DevicesPerNUMA


@dataclass(slots=True)
class Row:
    """One entry ready to write: validated, with the response already encoded."""

    pod_uid: str
    container_name: str
    resource_name: str
    devices: DevicesPerNUMA | None
    alloc_resp: bytes | None
    alloc_resp_json_null: bool = False


def _device_rows(
    allocation_id: int, devices: DevicesPerNUMA | None
) -> tuple[list[tuple[int, int, int, str]], list[tuple[int, int, bool]]]:
    rows: list[tuple[int, int, int, str]] = []
    empty: list[tuple[int, int, bool]] = []
    if devices:
        for node, ids in devices.items():
            if not ids:
                empty.append((allocation_id, node, ids is None))
                continue
            rows.extend((allocation_id, node, pos, dev) for pos, dev in enumerate(ids))
    return rows, empty


def write_one(conn: sqlite3.Connection, row: Row, op: str | None = None) -> None:
    """Create or replace one (pod, container, resource) entry, with its decoded response rows
    and its history event (``op``, by default 'insert' or 'replace')."""
    found = conn.execute(q.POD_ID, (row.pod_uid,)).fetchone()
    pod_id = found[0] if found else conn.execute(q.INSERT_POD, (row.pod_uid,)).lastrowid
    found = conn.execute(q.CONTAINER_ID, (pod_id, row.container_name)).fetchone()
    if found:
        container_id = found[0]
    else:
        container_id = conn.execute(q.INSERT_CONTAINER, (pod_id, row.container_name)).lastrowid
    flags = (row.devices is None, row.alloc_resp, row.alloc_resp_json_null)
    found = conn.execute(q.ALLOCATION_ID, (container_id, row.resource_name)).fetchone()
    if found:
        allocation_id = int(found[0])
        conn.execute(q.UPDATE_ALLOCATION, (*flags, allocation_id))
        conn.execute(q.CLEAR_ALLOCATION_DEVICES, (allocation_id,))
        conn.execute(q.CLEAR_EMPTY_LISTS, (allocation_id,))
        responses.clear(conn, [(allocation_id,)])
    else:
        cur = conn.execute(q.INSERT_ALLOCATION, (container_id, row.resource_name, *flags))
        assert cur.lastrowid is not None
        allocation_id = cur.lastrowid
    devices, empty = _device_rows(allocation_id, row.devices)
    if devices:
        conn.executemany(q.INSERT_DEVICE, devices)
    if empty:
        conn.executemany(q.INSERT_EMPTY_LIST, empty)
    responses.write(conn, allocation_id, row.alloc_resp)
    events = history.Pending()
    events.entry(
        op or ("replace" if found else "insert"),
        (row.pod_uid, row.container_name, row.resource_name),
        row.devices,
    )
    events.write(conn)


def write_many(conn: sqlite3.Connection, rows: Iterable[Row], op: str = "import") -> int:
    """Write entries in order with a handful of executemany calls; returns the entry count.

    Same meaning as calling write_one for each: a later duplicate replaces an earlier one and
    keeps its position. Ids are assigned here (max + 1 onwards), so new rows need no
    round trip each. Response rows and one ``op`` history event per entry go with them.
    """
    final: dict[tuple[str, str, str], Row] = {}
    for row in rows:
        final[(row.pod_uid, row.container_name, row.resource_name)] = row
    if not final:
        return 0
    pods: dict[str, int] = dict(conn.execute(q.ALL_POD_IDS).fetchall())
    containers: dict[tuple[int, str], int] = {
        (p, n): i for p, n, i in conn.execute(q.ALL_CONTAINER_IDS)
    }
    existing: dict[tuple[int, str], int] = {
        (c, r): i for c, r, i in conn.execute(q.ALL_ALLOCATION_IDS)
    }
    max_pod, max_container, max_allocation = conn.execute(q.MAX_IDS).fetchone()
    new_pods: list[tuple[int, str]] = []
    new_containers: list[tuple[int, int, str]] = []
    new_allocations: list[tuple[int, int, str, bool, bytes | None, bool]] = []
    updates: list[tuple[bool, bytes | None, bool, int]] = []
    cleared: list[tuple[int]] = []
    device_rows: list[tuple[int, int, int, str]] = []
    empty_rows: list[tuple[int, int, bool]] = []
    response_rows = responses.ResponseRows()
    events = history.Pending()
    for (uid, name, resource), row in final.items():
        pod_id = pods.get(uid)
        if pod_id is None:
            max_pod += 1
            pod_id = pods[uid] = max_pod
            new_pods.append((pod_id, uid))
        container_id = containers.get((pod_id, name))
        if container_id is None:
            max_container += 1
            container_id = containers[(pod_id, name)] = max_container
            new_containers.append((container_id, pod_id, name))
        flags = (row.devices is None, row.alloc_resp, row.alloc_resp_json_null)
        allocation_id = existing.get((container_id, resource))
        if allocation_id is None:
            max_allocation += 1
            allocation_id = max_allocation
            new_allocations.append((allocation_id, container_id, resource, *flags))
        else:
            updates.append((*flags, allocation_id))
            cleared.append((allocation_id,))
        devices, empty = _device_rows(allocation_id, row.devices)
        device_rows.extend(devices)
        empty_rows.extend(empty)
        response_rows.add(allocation_id, row.alloc_resp)
        events.entry(op, (uid, name, resource), row.devices)
    conn.executemany(q.INSERT_POD_WITH_ID, new_pods)
    conn.executemany(q.INSERT_CONTAINER_WITH_ID, new_containers)
    conn.executemany(q.INSERT_ALLOCATION_WITH_ID, new_allocations)
    conn.executemany(q.UPDATE_ALLOCATION, updates)
    conn.executemany(q.CLEAR_ALLOCATION_DEVICES, cleared)
    conn.executemany(q.CLEAR_EMPTY_LISTS, cleared)
    conn.executemany(q.INSERT_DEVICE, device_rows)
    conn.executemany(q.INSERT_EMPTY_LIST, empty_rows)
    responses.clear(conn, cleared)
    response_rows.write(conn)
    events.write(conn)
    return len(final)


def delete_pods(conn: sqlite3.Connection, pod_uids: Iterable[str]) -> None:
    """Drop whole pods (cascading to their entries), with a 'delete' event per entry."""
    uids = list(pod_uids)
    events = history.Pending()
    history.record_deletes(conn, uids, events)
    events.write(conn)
    conn.executemany(q.DELETE_POD, [(u,) for u in uids])


def delete_all(conn: sqlite3.Connection, keep: Iterable[tuple[str, str, str]] = ()) -> None:
    """Drop every pod (a non-merge import), with a 'delete' event for each entry whose key is
    not in ``keep`` (the import rewrites those, and records them itself)."""
    events = history.Pending()
    history.record_drops(conn, set(keep), events)
    events.write(conn)
    conn.execute(q.DELETE_ALL_PODS)


def replace_registered(
    conn: sqlite3.Connection,
    registered: Mapping[str, list[str] | None] | None,
    *,
    whole: bool,
) -> None:
    """Write RegisteredDevices: the whole mapping (``whole``) or resource by resource, with a
    history event per resource whose list changes."""
    events = history.Pending()
    history.record_registered(conn, registered, whole=whole, pending=events)
    events.write(conn)
    if whole:
        conn.execute(q.CLEAR_REGISTERED)
        conn.execute(q.SET_META, ("registered_json_null", "1" if registered is None else "0"))
    if not registered:
        return
    if not whole:
        conn.executemany(q.DELETE_REGISTERED_RESOURCE, [(r,) for r in registered])
        conn.execute(q.SET_META, ("registered_json_null", "0"))
    conn.executemany(
        q.INSERT_REGISTERED_RESOURCE, [(r, ids is None) for r, ids in registered.items()]
    )
    conn.executemany(
        q.INSERT_REGISTERED_DEVICE,
        [(r, pos, dev) for r, ids in registered.items() for pos, dev in enumerate(ids or ())],
    )
