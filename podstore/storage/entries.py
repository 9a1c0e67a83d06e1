"""Allocation entries and registered devices: written one at a time (``insert``) or in bulk
(restore, import), with their history events, in the caller's transaction; and read back.

The one-at-a-time and bulk paths give the same result (the state-machine test checks it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podstore.storage import events, responses, spans
from podstore.storage.rows import BULK_ROWS, DeviceRow, EmptyRow, Row, device_rows
from podstore.storage.sql import entries as sql
from podstore.types import DevicesPerNUMA, PodDevicesEntry, ResourceDeviceInstances

Key = events.Key


# ---- writing ---------------------------------------------------------------------------------


def write_one(conn: sqlite3.Connection, row: Row, op: str | None = None) -> None:
    """Create or replace one (pod, container, resource) entry, with its device spans, its
    response JSON and its history event (``op``, by default 'insert' or 'replace')."""
    key = (row.pod_uid, row.container_name, row.resource_name)
    found = conn.execute(sql.ENTRY_IDS, key).fetchone()
    if found is None:
        pod_id = conn.execute(sql.INSERT_POD, (row.pod_uid,)).lastrowid
        container_id = allocation_id = None
    else:
        pod_id, container_id, allocation_id = found
    if container_id is None:
        container_id = conn.execute(sql.INSERT_CONTAINER, (pod_id, row.container_name)).lastrowid
    stamp = events.next_stamp(conn)
    seq = stamp[0]
    values = _allocation_values(row, responses.to_json)
    released: list[str] = []
    if allocation_id is None:
        allocation_id = conn.execute(
            sql.INSERT_ALLOCATION, (container_id, row.resource_name, *values)
        ).lastrowid
        assert allocation_id is not None
        replacing = False
    else:
        conn.execute(sql.UPDATE_ALLOCATION, (*values, allocation_id))
        listed_before = conn.execute(sql.HELD_DEVICES, (allocation_id,)).fetchall()
        released = events.released_devices((d for (d,) in listed_before), row.devices)
        if listed_before:
            conn.execute(sql.CLOSE_SPANS, spans.ending(seq, released, allocation_id))
        conn.execute(sql.CLEAR_EMPTY_LISTS, (allocation_id,))
        replacing = True
    if row.devices:
        spans.write(conn, *device_rows(row.devices, allocation_id, seq))
    events.append_entry(
        conn, stamp, op or ("replace" if replacing else "insert"), key, row.devices, released
    )


def _allocation_values(
    row: Row, to_json: Callable[[Any], str | None]
) -> tuple[bool, bytes | None, bool, str | None]:
    """(device_ids_null, alloc_resp, alloc_resp_json_null, response) of the allocation row."""
    raw = None if row.response is None else row.response.raw
    return row.devices is None, raw, row.alloc_resp_json_null, to_json(row.response)


#: Entries per chunk of write_many, so an import never holds all its SQL rows at once.
CHUNK = 512


def write_many(conn: sqlite3.Connection, rows: Iterable[Row], op: str = "import") -> int:
    """Write entries as write_one would, one ``op`` event each, in a few executemany calls
    per chunk (ids assigned here, max + 1 onwards); returns the entry count."""
    final: dict[Key, Row] = {}
    for row in rows:
        final[(row.pod_uid, row.container_name, row.resource_name)] = row
    if not final:
        return 0
    pods: dict[str, int] = dict(conn.execute(sql.ALL_POD_IDS).fetchall())
    containers: dict[tuple[int, str], int] = {
        (p, n): i for p, n, i in conn.execute(sql.ALL_CONTAINER_IDS)
    }
    existing: dict[tuple[int, str], int] = {
        (c, r): i for c, r, i in conn.execute(sql.ALL_ALLOCATION_IDS)
    }
    ids = list(conn.execute(sql.MAX_IDS).fetchone())
    stamp = events.next_stamp(conn)
    items = list(final.items())
    del final
    for start in range(0, len(items), CHUNK):
        stamp = _write_chunk(
            conn, items[start : start + CHUNK], op, pods, containers, existing, ids, stamp
        )
    return len(items)


def write_rows(conn: sqlite3.Connection, rows: list[Row], op: str) -> None:
    """Write ``rows`` with ``op`` events: one at a time up to BULK_ROWS, else in bulk (the same
    result either way)."""
    if len(rows) > BULK_ROWS:
        write_many(conn, rows, op)
    else:
        for row in rows:
            write_one(conn, row, op)


def _write_chunk(
    conn: sqlite3.Connection,
    items: list[tuple[Key, Row]],
    op: str,
    pods: dict[str, int],
    containers: dict[tuple[int, str], int],
    existing: dict[tuple[int, str], int],
    ids: list[int],
    stamp: events.Stamp,
) -> events.Stamp:
    """One chunk of write_many; advances ``ids`` (highest pod, container, allocation id) in
    place and returns the next chunk's stamp."""
    new_pods: list[tuple[int, str]] = []
    new_containers: list[tuple[int, int, str]] = []
    new_allocations: list[tuple[Any, ...]] = []
    updates: list[tuple[Any, ...]] = []
    replaced: dict[int, int] = {}  # allocation id → the seq of the event that rewrites it
    opened: list[DeviceRow] = []
    empty_rows: list[EmptyRow] = []
    # (key, devices, the allocation it replaces or None): the events, queued once the
    # replaced entries' old devices are known.
    written: list[tuple[Key, DevicesPerNUMA | None, int | None]] = []
    to_json = responses.to_json
    seq = stamp[0]
    for (uid, name, resource), row in items:
        pod_id = pods.get(uid)
        if pod_id is None:
            ids[0] += 1
            pod_id = pods[uid] = ids[0]
            new_pods.append((pod_id, uid))
        container_id = containers.get((pod_id, name))
        if container_id is None:
            ids[1] += 1
            container_id = containers[(pod_id, name)] = ids[1]
            new_containers.append((container_id, pod_id, name))
        values = _allocation_values(row, to_json)
        allocation_id = existing.get((container_id, resource))
        if allocation_id is None:
            ids[2] += 1
            allocation_id = existing[(container_id, resource)] = ids[2]
            new_allocations.append((allocation_id, container_id, resource, *values))
            written.append(((uid, name, resource), row.devices, None))
        else:
            updates.append((*values, allocation_id))
            replaced[allocation_id] = seq
            written.append(((uid, name, resource), row.devices, allocation_id))
        if row.devices:
            more, empty = device_rows(row.devices, allocation_id, seq)
            opened += more
            empty_rows += empty
        seq += 1
    conn.executemany(sql.INSERT_POD_WITH_ID, new_pods)
    conn.executemany(sql.INSERT_CONTAINER_WITH_ID, new_containers)
    conn.executemany(sql.INSERT_ALLOCATION_WITH_ID, new_allocations)
    listed_before: dict[int, list[str]] = {}
    if updates:
        conn.executemany(sql.UPDATE_ALLOCATION, updates)
        # A key written twice in one chunk is folded before (write_many), so each id once.
        chosen = json.dumps(list(replaced))
        for aid, device_id in conn.execute(sql.HELD_BY_ALLOCATIONS, (chosen,)).fetchall():
            listed_before.setdefault(int(aid), []).append(device_id)
        conn.executemany(sql.CLEAR_EMPTY_LISTS, [(aid,) for aid in replaced])
    pending = events.Pending()
    closing: list[tuple[int, str | None, int]] = []
    for key, numa_map, old in written:
        gone: list[str] = []
        if old is not None and old in listed_before:
            gone = events.released_devices(listed_before[old], numa_map)
            closing.append(spans.ending(replaced[old], gone, old))
        pending.entry(op, key, numa_map, gone, spans=True)
    if closing:
        conn.executemany(sql.CLOSE_SPANS, closing)
    spans.write(conn, opened, empty_rows)
    return pending.write(conn, stamp)


def delete_pods(conn: sqlite3.Connection, pod_uids: Iterable[str]) -> None:
    """Drop whole pods (cascading to their entries), with a 'delete' event per entry, which
    ends the entry's device spans."""
    uids = list(dict.fromkeys(pod_uids))
    pending = events.Pending()
    stamp = events.next_stamp(conn)
    closing: list[tuple[int, str | None, int]] = []
    seq = stamp[0]
    for uid in uids:
        for allocation_id, key, devices in _pod_maps(conn, uid):
            pending.entry("delete", key, devices, spans=True)
            closing.append(spans.ending(seq, (), allocation_id))
            seq += 1
    if not closing:
        return
    pending.write(conn, stamp)
    conn.executemany(sql.CLOSE_SPANS, closing)
    if len(uids) == 1:
        conn.execute(sql.DELETE_POD, (uids[0],))
    else:
        conn.executemany(sql.DELETE_POD, [(u,) for u in uids])


def _pod_maps(
    conn: sqlite3.Connection, pod_uid: str
) -> Iterator[tuple[int, Key, DevicesPerNUMA | None]]:
    """(allocation id, key, NUMA map) of one pod's entries, in position order."""
    current: int | None = None
    key: Key = ("", "", "")
    per_numa: DevicesPerNUMA | None = None
    for aid, name, resource, ids_null, node, _pos, device_id, empty in conn.execute(
        sql.ENTRY_LISTS_OF_POD, {"pod": pod_uid}
    ):
        if aid != current:
            if current is not None:
                yield current, key, per_numa
            current, key = aid, (pod_uid, name, resource)
            per_numa = None if ids_null else {}
        if per_numa is None or node is None:
            continue
        if empty is not None:
            per_numa[int(node)] = None if empty else []
        else:
            lst = per_numa.setdefault(int(node), [])
            assert lst is not None
            lst.append(device_id)
    if current is not None:
        yield current, key, per_numa


def delete_all(conn: sqlite3.Connection, keep: Iterable[Key] = ()) -> None:
    """Drop every pod (a non-merge import), with a 'delete' event for each entry whose key is
    not in ``keep`` (the import writes those anew as new entries, and records them itself:
    their spans end naming nothing, at the seq the import's first event takes)."""
    kept = set(keep)
    pending = events.Pending()
    stamp = events.next_stamp(conn)
    closing: list[tuple[int, str | None, int]] = []
    silent: list[int] = []
    seq = stamp[0]
    for entry in read_entries(conn):
        if entry.key in kept:
            silent.append(entry.allocation_id)
        else:
            pending.entry("delete", entry.key, entry.device_ids, spans=True)
            closing.append(spans.ending(seq, (), entry.allocation_id))
            seq += 1
    pending.write(conn, stamp)
    closing += [spans.ending(seq, None, aid) for aid in silent]
    conn.executemany(sql.CLOSE_SPANS, closing)
    conn.execute(sql.DELETE_ALL_PODS)


def replace_registered(
    conn: sqlite3.Connection, registered: Mapping[str, list[str] | None] | None, *, whole: bool
) -> None:
    """Write RegisteredDevices: the whole mapping (``whole``) or resource by resource, with a
    history event per resource whose list changes."""
    old = current_registered(conn)
    new: dict[str, list[str] | None] = {} if whole else dict(old)
    new.update(registered or {})
    pending = events.Pending()
    for resource in sorted(old.keys() - new.keys()):
        pending.registered("unregistered", resource, old[resource])
    for resource, ids in new.items():
        if resource not in old or old[resource] != ids:
            pending.registered("registered", resource, ids)
    pending.write(conn)
    if whole:
        conn.execute(sql.CLEAR_REGISTERED)
        conn.execute(sql.SET_META, ("registered_json_null", "1" if registered is None else "0"))
    if not registered:
        return
    if not whole:
        conn.executemany(sql.DELETE_REGISTERED_RESOURCE, [(r,) for r in registered])
        conn.execute(sql.SET_META, ("registered_json_null", "0"))
    conn.executemany(
        sql.INSERT_REGISTERED_RESOURCE, [(r, ids is None) for r, ids in registered.items()]
    )
    conn.executemany(
        sql.INSERT_REGISTERED_DEVICE,
        [(r, pos, dev) for r, ids in registered.items() for pos, dev in enumerate(ids or ())],
    )


# ---- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One entry as stored: its key, NUMA map (null kept apart from empty) and response."""

    allocation_id: int
    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: DevicesPerNUMA | None
    alloc_resp: bytes | None
    alloc_resp_json_null: bool

    @property
    def key(self) -> Key:
        return (self.pod_uid, self.container_name, self.resource_name)

    def checkpoint_entry(self, *, file_form: bool = False) -> PodDevicesEntry:
        """The entry as ``toCheckpointData`` gives it, or (``file_form``) as an exported file
        writes it: a JSON-null AllocResp is restored by kubelet as an empty message (``b""``),
        and only the file form writes ``null`` back."""
        resp = None if file_form and self.alloc_resp_json_null else self.alloc_resp
        return PodDevicesEntry(
            self.pod_uid, self.container_name, self.resource_name, self.device_ids, resp
        )


def read_entries(
    conn: sqlite3.Connection, pod_uid: str | None = None, *, with_response: bool = False
) -> Iterator[StoredEntry]:
    """Every entry (of one pod; only those with a response), in position order, streamed:
    three scans in allocation order merged as they go, nothing held or sorted."""
    if pod_uid is None:
        params: dict[str, str] = {}
        entry_sql = sql.ENTRIES_WITH_RESPONSE if with_response else sql.ENTRIES
        devices = conn.cursor().execute(sql.DEVICE_ROWS)
        empties = conn.cursor().execute(sql.EMPTY_LISTS)
    else:
        # with_response filters in Python here: one pod has a handful of entries.
        params = {"pod": pod_uid}
        entry_sql = sql.ENTRIES_OF_POD
        devices = conn.cursor().execute(sql.DEVICE_ROWS_OF_POD, params)
        empties = conn.cursor().execute(sql.EMPTY_LISTS_OF_POD, params)
    next_device = devices.fetchone()
    next_empty = empties.fetchone()
    for aid, uid, name, resource, ids_null, resp, resp_null in conn.cursor().execute(
        entry_sql, params
    ):
        per_numa: DevicesPerNUMA = {}
        # Rows of entries that are not listed (no response) are passed over on the way.
        while next_device is not None and next_device[0] <= aid:
            if next_device[0] == aid:
                lst = per_numa.setdefault(int(next_device[1]), [])
                assert lst is not None
                lst.append(next_device[2])
            next_device = devices.fetchone()
        while next_empty is not None and next_empty[0] <= aid:
            if next_empty[0] == aid:
                per_numa[int(next_empty[1])] = None if next_empty[2] else []
            next_empty = empties.fetchone()
        if with_response and resp is None:
            continue
        yield StoredEntry(
            int(aid),
            uid,
            name,
            resource,
            None if ids_null else dict(sorted(per_numa.items())),
            None if resp is None else bytes(resp),
            bool(resp_null),
        )


def current_entries(
    conn: sqlite3.Connection, pod_uid: str | None = None
) -> dict[Key, DevicesPerNUMA | None]:
    """(pod, container, resource) → NUMA map of every entry (of one pod), in position order."""
    return {e.key: e.device_ids for e in read_entries(conn, pod_uid)}


def current_registered(conn: sqlite3.Connection) -> dict[str, list[str] | None]:
    """resource → registered device list (None where the checkpoint had null)."""
    return registered_from_rows(conn.execute(sql.REGISTERED))


def registered_from_rows(
    rows: Iterable[tuple[str, int, str | None]],
) -> dict[str, list[str] | None]:
    """resource → device list from (resource, is_null, device_id) rows in position order, a
    resource without devices giving one row with a NULL device_id."""
    out: dict[str, list[str] | None] = {}
    for resource, is_null, device_id in rows:
        if is_null:
            out[resource] = None
            continue
        lst = out.setdefault(resource, [])
        if device_id is not None and lst is not None:
            lst.append(device_id)
    return out


def meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A ``store_meta`` value, or None when unset."""
    row = conn.execute(sql.GET_META, (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(sql.SET_META, (key, value))


#: The ``store_meta`` key of the device checkpoint's top-level ``BootID`` (absent: the file
#: had none, or an empty one).
BOOT_ID = "boot_id"


def keep_boot_id(conn: sqlite3.Connection, boot_id: str | None, *, merge: bool) -> bool:
    """Keep the file's ``BootID`` for export; whether the stored one changed. A replacing
    import (and a sync) takes the file's, none included; a merge, which puts the file's
    values over the store's, takes the file's only when it has one (a file without one says
    nothing about the boot)."""
    old = meta(conn, BOOT_ID)
    new = boot_id or None
    if merge and new is None:
        return False
    if new == old:
        return False
    if new is None:
        conn.execute(sql.DELETE_META, (BOOT_ID,))
    else:
        set_meta(conn, BOOT_ID, new)
    return True


# ---- shaping query rows ------------------------------------------------------------------------


def shape_topology(rows: Sequence[Any]) -> ResourceDeviceInstances | None:
    """ResourceDeviceInstances from CONTAINER_TOPOLOGY rows (no rows: unknown container)."""
    if not rows:
        return None
    # Here, not at the top: a process that builds no Device never loads protobuf.
    from podstore.deviceplugin import Device, NUMANode, TopologyInfo

    out = ResourceDeviceInstances()
    for resource, device_id, nodes, has_keys in rows:
        if resource is None or not has_keys:
            continue
        instances = out.setdefault(resource, {})
        if device_id is None:
            continue
        device = Device()
        if nodes is not None:
            ids = sorted({int(n) for n in str(nodes).split(",")})
            device.topology.CopyFrom(TopologyInfo(nodes=[NUMANode(ID=n) for n in ids]))
        instances[device_id] = device
    return out


def hex_text(value: str) -> str:
    """As SQLite's hex() renders a TEXT value (see sql/entries._MINE)."""
    return value.encode("utf-8").hex().upper()


def unhex_text(value: str) -> str:
    return bytes.fromhex(value).decode("utf-8")
