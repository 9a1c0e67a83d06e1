"""A sync: the store brought to a checkpoint file's content by writing only what differs
(what counts as a change, and the order of the events: docs/watch.md).

The file is read and verified before the write lock; SQL set differences (``sql/sync.py``) name
what to write, and the ordinary entry writers write it. Every sync loads the whole file (a
follower's cache of the last read saved only about 3 ms a sync at 110 pods).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from podstore.checkpoint import Checkpoint
from podstore.checkpoint.bulk import collector_paused
from podstore.sqlite.sessions import Sessions
from podstore.storage import entries, events, responses, rows, spans
from podstore.storage.entries import Key
from podstore.storage.rows import Row
from podstore.storage.sql import entries as entries_sql
from podstore.storage.sql import sync as sql
from podstore.types import DevicesPerNUMA, PodDevicesEntry, SkippedEntry, SyncReport

#: Deletes of more pods than this read the whole store once rather than pod by pod.
_POD_READS = 64


@dataclass(slots=True)
class PreparedSync:
    """A verified checkpoint, read before the write lock; responses are decoded later, and
    only those the store does not already hold byte for byte."""

    path: str
    checkpoint: Checkpoint


def prepare(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> PreparedSync:
    """Read and verify ``path`` exactly as an import does (``rows.read_verified``)."""
    return PreparedSync(*rows.read_verified(path, max_bytes))


def sync_file(
    sessions: Sessions, path: str | os.PathLike[str], *, max_bytes: int | None = None
) -> SyncReport:
    """Bring the store to the file at ``path`` in one transaction of its own (read and
    verified before the write lock)."""
    prepared = prepare(path, max_bytes=max_bytes)
    with sessions.write() as conn:
        return apply(conn, prepared)


class _File:
    """The file's entries as kubelet restores them, by ``ord``, decoded only when new or
    their bytes differ from the stored ones. Repeated keys are decoded at once: an undecodable
    entry is skipped *before* duplicates fold (the last decodable wins, at the first's place).
    """

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.skipped: list[SkippedEntry] = []
        listed = checkpoint.entries
        first: dict[Key, int] = {}
        for i, e in enumerate(listed):
            first.setdefault((e.pod_uid, e.container_name, e.resource_name), i)
        #: (file index, the entry that counts, its row if decoded already), in file order
        self.kept: list[tuple[int, PodDevicesEntry, Row | None]]
        if len(first) == len(listed):
            self.kept = [(i, e, None) for i, e in enumerate(listed)]
        else:
            self.kept = self._folded(listed)
        self.entries: dict[int, tuple[int, PodDevicesEntry]] = {}  # ord → (file index, entry)
        self.rows: dict[int, Row] = {}  # ord → decoded row

    def _folded(
        self, listed: list[PodDevicesEntry]
    ) -> list[tuple[int, PodDevicesEntry, Row | None]]:
        seen: dict[Key, list[int]] = {}
        for i, e in enumerate(listed):
            seen.setdefault((e.pod_uid, e.container_name, e.resource_name), []).append(i)
        kept: list[tuple[int, PodDevicesEntry, Row | None]] = []
        for indices in seen.values():
            if len(indices) == 1:
                kept.append((indices[0], listed[indices[0]], None))
                continue
            decoded = [(i, r) for i in indices if (r := self._decode(i, listed[i])) is not None]
            if decoded:
                kept.append((decoded[0][0], listed[decoded[-1][0]], decoded[-1][1]))
        kept.sort(key=lambda k: k[0])
        return kept

    def _decode(self, index: int, entry: PodDevicesEntry) -> Row | None:
        row = rows.to_row(entry)
        if isinstance(row, str):
            self.skipped.append(rows.skipped_entry(index, entry, row))
            return None
        return row

    def row(self, ord_: int) -> Row | None:
        """The decoded row of an entry, or None when kubelet would skip it."""
        row = self.rows.get(ord_)
        if row is None:
            row = self._decode(*self.entries[ord_])
            if row is not None:
                self.rows[ord_] = row
        return row

    def in_file_order(self, ords: Iterable[int]) -> list[int]:
        return sorted(ords, key=lambda o: self.entries[o][0])


def apply(conn: sqlite3.Connection, prepared: PreparedSync) -> SyncReport:
    """Bring the store to ``prepared``'s content inside the caller's transaction."""
    for statement in sql.SETUP:
        conn.execute(statement)
    _clear(conn)
    try:
        # Tens of thousands of short-lived tuples per sync: the cyclic collector would rescan
        # the whole checkpoint for them (as when reading it).
        with collector_paused():
            return _apply(conn, prepared)
    finally:
        # SQLite rolls a transaction back by itself on some errors (a full disk), and with it
        # the tables SETUP created in it: clearing them then would only hide the error.
        if conn.in_transaction:
            _clear(conn)


def _clear(conn: sqlite3.Connection) -> None:
    for statement in sql.CLEAR:
        conn.execute(statement)


def _load_entries(conn: sqlite3.Connection, file: _File) -> None:
    """Fill the file tables with the file's entries (``ord``: their place in ``file.kept``)."""
    entry_rows: list[tuple[Any, ...]] = []
    device_rows: list[rows.DeviceRow] = []
    empty_rows: list[rows.EmptyRow] = []
    for ord_, (index, e, row) in enumerate(file.kept):
        devices, empty = rows.device_rows(e.device_ids, ord_)
        key = (e.pod_uid, e.container_name, e.resource_name)
        raw = b"" if e.alloc_resp is None else e.alloc_resp
        entry_rows.append(
            (ord_, *key, e.device_ids is None, raw, e.alloc_resp is None, len(devices))
        )
        device_rows.extend(devices)
        empty_rows.extend(empty)
        file.entries[ord_] = (index, e)
        if row is not None:
            file.rows[ord_] = row
    conn.executemany(sql.LOAD_ENTRY, entry_rows)
    conn.executemany(sql.LOAD_DEVICE, device_rows)
    conn.executemany(sql.LOAD_EMPTY_LIST, empty_rows)


def _decode_needed(conn: sqlite3.Connection, file: _File, ords: list[int]) -> list[int]:
    """The ords whose responses decode; the others leave the sync (so become deletes)."""
    kept = []
    for ord_ in ords:
        if file.row(ord_) is None:
            for statement in sql.DROP_ENTRY:
                conn.execute(statement, (ord_,))
        else:
            kept.append(ord_)
    return kept


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
    stamp = events.next_stamp(conn)
    closing = []
    for seq, (aid, uid, name, resource) in enumerate(doomed, start=stamp[0]):
        pending.entry("delete", (uid, name, resource), maps[aid], spans=True)
        closing.append(spans.ending(seq, (), aid))
    pending.write(conn, stamp)
    conn.executemany(entries_sql.CLOSE_SPANS, closing)
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
    gone = entries.registered_from_rows(conn.execute(sql.UNREGISTERED).fetchall())
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


def _sync_shape(conn: sqlite3.Connection, cp: Checkpoint) -> bool:
    """Store the file's null-vs-empty form of its two top-level fields, as an import does;
    whether either changed."""
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
    return entries.keep_boot_id(conn, cp.boot_id, merge=False) or changed


def _apply(conn: sqlite3.Connection, prepared: PreparedSync) -> SyncReport:
    file = _File(prepared.checkpoint)
    _load_entries(conn, file)
    conn.execute(sql.PAIR)
    conn.execute(sql.CANDIDATES)
    new = file.in_file_order(int(o) for (o,) in conn.execute(sql.NEW).fetchall())
    candidates = [int(o) for (o,) in conn.execute(sql.CANDIDATE_ORDS).fetchall()]
    new = _decode_needed(conn, file, new)
    candidates = _decode_needed(conn, file, candidates)
    conn.execute(sql.DOOM)
    changed = {int(o) for (o,) in conn.execute(sql.CHANGED_DEVICES).fetchall()}
    conn.executemany(
        sql.LOAD_CANDIDATE_RESPONSE,
        [(responses.to_json(file.rows[o].response), o) for o in candidates],
    )
    changed.update(int(o) for (o,) in conn.execute(sql.CHANGED_RESPONSES).fetchall())
    # A changed entry whose bytes equal the stored ones decodes (they did when stored).
    replaced: list[Row] = []
    for ord_ in file.in_file_order(changed):
        row = file.row(ord_)
        assert row is not None
        replaced.append(row)
    inserted: list[Row] = [file.rows[o] for o in new]

    deleted = _delete(conn)
    registered, unregistered = _sync_registered(conn, prepared.checkpoint.registered_devices)
    shape_changed = _sync_shape(conn, prepared.checkpoint)
    entries.write_rows(conn, replaced, "replace")
    entries.write_rows(conn, inserted, "insert")
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
        inserted=len(inserted),
        replaced=len(replaced),
        deleted=deleted,
        registered=registered,
        unregistered=unregistered,
        shape_changed=shape_changed,
        skipped=tuple(sorted(file.skipped, key=lambda s: s.index)),
    )
