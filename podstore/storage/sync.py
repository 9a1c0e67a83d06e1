"""Bringing the store to a checkpoint file's content by writing only what differs (a sync).

The file is read and verified exactly as an import reads it (``transfer.prepare_import``),
before the write lock. Inside the caller's transaction its rows go into temporary tables and
SQL set differences against the store (``sql/sync.py``) name the entries to insert, replace
and delete and the registered resources that changed; only those are written, through the
same entry writers as every other change (``storage/entries.py``), so decoded response rows,
history events and entry positions are exactly what an insert, a delete or an import makes.

What counts as a change: an entry the file adds (``insert``) or drops (``delete``), an entry
whose device map — as a multiset per NUMA node, null kept apart from empty — or whose decoded
response differs, or that had no response or a null AllocResp where the file has another
(``replace``); a registered resource added or changed as a multiset (``registered``) or gone
(``unregistered``). Order alone is never a change, so an unchanged entry keeps its position
and its stored bytes.

Events are written in this order: deletes (store order), unregistered and registered
resources (by name), replaces, then inserts (file order). New entries take the next
positions in file order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from podstore.storage import entries, events, responses
from podstore.storage.entries import Key, Row
from podstore.storage.sql import sync as sql
from podstore.storage.transfer import PreparedImport
from podstore.types import DevicesPerNUMA, SyncReport

#: Above this many rows a write goes through the bulk writer (as ``from_checkpoint_data``).
_BULK = 64
#: Deletes of more pods than this read the whole store once rather than pod by pod.
_POD_READS = 64


def apply(conn: sqlite3.Connection, prepared: PreparedImport) -> SyncReport:
    """Bring the store to ``prepared``'s content inside the caller's transaction."""
    for statement in sql.SETUP:
        conn.execute(statement)
    _clear(conn)
    try:
        return _apply(conn, prepared)
    finally:
        _clear(conn)


def _clear(conn: sqlite3.Connection) -> None:
    for statement in sql.CLEAR:
        conn.execute(statement)


def _fold(rows: Iterable[Row]) -> list[Row]:
    """The file's rows with duplicate keys folded as kubelet's restore folds them: the last
    one wins, at the first one's position."""
    final: dict[Key, Row] = {}
    for row in rows:
        final[(row.pod_uid, row.container_name, row.resource_name)] = row
    return list(final.values())


def _load_entries(conn: sqlite3.Connection, rows: list[Row]) -> None:
    entry_rows = []
    device_rows: list[tuple[int, int, str]] = []
    empty_rows: list[tuple[int, int, bool]] = []
    for ord_, row in enumerate(rows):
        assert row.response is not None  # a file entry always restores with a response
        entry_rows.append(
            (
                ord_,
                row.pod_uid,
                row.container_name,
                row.resource_name,
                row.devices is None,
                row.response.raw,
                row.alloc_resp_json_null,
            )
        )
        for node, ids in (row.devices or {}).items():
            if ids:
                device_rows.extend((ord_, node, dev) for dev in ids)
            else:
                empty_rows.append((ord_, node, ids is None))
    conn.executemany(sql.LOAD_ENTRY, entry_rows)
    conn.executemany(sql.LOAD_DEVICE, device_rows)
    conn.executemany(sql.LOAD_EMPTY_LIST, empty_rows)


def _load_candidate_responses(conn: sqlite3.Connection, rows: list[Row]) -> None:
    """Decoded rows of the paired entries whose response bytes differ from the stored ones."""
    decoded = responses.ResponseRows()
    for (ord_,) in conn.execute(sql.CANDIDATE_ORDS).fetchall():
        decoded.add(ord_, rows[ord_].response)
    for statement, values in (
        (sql.LOAD_ENV, decoded.envs),
        (sql.LOAD_MOUNT, decoded.mounts),
        (sql.LOAD_RESPONSE_DEVICE, decoded.devices),
        (sql.LOAD_ANNOTATION, decoded.annotations),
        (sql.LOAD_CDI, decoded.cdi),
    ):
        if values:
            conn.executemany(statement, values)


def _write(conn: sqlite3.Connection, rows: list[Row], op: str) -> None:
    if len(rows) > _BULK:
        entries.write_many(conn, rows, op)
    else:
        for row in rows:
            entries.write_one(conn, row, op)


def _device_maps(
    conn: sqlite3.Connection, doomed: list[tuple[int, str, str, str]]
) -> dict[int, DevicesPerNUMA | None]:
    """allocation id → NUMA map of the entries about to be deleted (for their events)."""
    wanted = {d[0] for d in doomed}
    pods = sorted({d[1] for d in doomed})
    if len(pods) > _POD_READS:
        found = entries.read_entries(conn)
        return {e.allocation_id: e.device_ids for e in found if e.allocation_id in wanted}
    return {
        e.allocation_id: e.device_ids
        for uid in pods
        for e in entries.read_entries(conn, uid)
        if e.allocation_id in wanted
    }


def _delete(conn: sqlite3.Connection) -> int:
    doomed = [
        (int(aid), uid, name, resource)
        for aid, uid, name, resource in conn.execute(sql.DOOMED).fetchall()
    ]
    if not doomed:
        return 0
    maps = _device_maps(conn, doomed)
    pending = events.Pending()
    for aid, uid, name, resource in doomed:
        pending.entry("delete", (uid, name, resource), maps[aid])
    pending.write(conn)
    conn.execute(sql.DELETE_DOOMED)
    return len(doomed)


def _sync_registered(
    conn: sqlite3.Connection, registered: dict[str, list[str] | None] | None
) -> tuple[int, int]:
    """Write the registered resources that differ; (registered, unregistered) event counts."""
    wanted = registered or {}
    conn.executemany(sql.LOAD_REGISTERED, [(r, ids is None) for r, ids in wanted.items()])
    conn.executemany(
        sql.LOAD_REGISTERED_DEVICE, [(r, d) for r, ids in wanted.items() for d in ids or ()]
    )
    gone: dict[str, list[str] | None] = {}
    for resource, is_null, device_id in conn.execute(sql.UNREGISTERED).fetchall():
        if is_null:
            gone[resource] = None
        else:
            lst = gone.setdefault(resource, [])
            if device_id is not None and lst is not None:
                lst.append(device_id)
    changed = [r for (r,) in conn.execute(sql.CHANGED_REGISTERED).fetchall()]
    if gone:
        pending = events.Pending()
        for resource in sorted(gone):
            pending.registered("unregistered", resource, gone[resource])
        pending.write(conn)
        conn.executemany(sql.DELETE_REGISTERED, [(r,) for r in gone])
    for resource in changed:
        # Each differs from its stored list, so the writer records it once; one call per
        # resource keeps the events in name order.
        entries.replace_registered(conn, {resource: wanted[resource]}, whole=False)
    return len(changed), len(gone)


def _sync_shape(conn: sqlite3.Connection, prepared: PreparedImport) -> bool:
    """Store the file's null-vs-empty form of its two top-level fields, as an import does;
    whether either changed."""
    cp = prepared.checkpoint
    explicit_empty = not cp.entries_null and not cp.entries
    want = {
        "entries_json": "[]" if explicit_empty else "null",
        "registered_json_null": "1" if cp.registered_devices is None else "0",
    }
    # An unset key reads as kubelet's usual form (what export assumes).
    defaults = {"entries_json": "null", "registered_json_null": "0"}
    changed = False
    for key, value in want.items():
        if (entries.meta(conn, key) or defaults[key]) != value:
            entries.set_meta(conn, key, value)
            changed = True
    return changed


def _apply(conn: sqlite3.Connection, prepared: PreparedImport) -> SyncReport:
    rows = _fold(prepared.rows)
    _load_entries(conn, rows)
    conn.execute(sql.PAIR)
    conn.execute(sql.DOOM)
    new = [rows[o] for (o,) in conn.execute(sql.NEW).fetchall()]
    changed = {int(o) for (o,) in conn.execute(sql.CHANGED_DEVICES).fetchall()}
    conn.execute(sql.CANDIDATES)
    _load_candidate_responses(conn, rows)
    changed.update(int(o) for (o,) in conn.execute(sql.CHANGED_RESPONSES).fetchall())
    replaced = [rows[o] for o in sorted(changed)]

    deleted = _delete(conn)
    registered, unregistered = _sync_registered(conn, prepared.checkpoint.registered_devices)
    shape_changed = _sync_shape(conn, prepared)
    _write(conn, replaced, "replace")
    _write(conn, new, "insert")
    if deleted:
        # After the inserts, so that a pod which loses one entry and gains another keeps its row.
        conn.execute(sql.DELETE_EMPTIED_CONTAINERS)
        conn.execute(sql.DELETE_EMPTIED_PODS)
    cp = prepared.checkpoint
    return SyncReport(
        path=prepared.path,
        version=cp.version,
        checksum=cp.checksum,
        boot_id=cp.boot_id,
        entries=len(cp.entries),
        inserted=len(new),
        replaced=len(replaced),
        deleted=deleted,
        registered=registered,
        unregistered=unregistered,
        shape_changed=shape_changed,
        skipped=tuple(prepared.skipped),
    )
