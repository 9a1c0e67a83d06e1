"""Shipping a node's history to the fleet database, exactly once (docs/fleet.md).

Each batch is one PostgreSQL transaction that

1. locks the store's ``fleet_stores`` row and reads ``last_seq``, the newest node seq held;
2. reads up to ``batch_size`` node events after it, in one read transaction of its own on a
   read-only connection to the store file (the node store is never written);
3. inserts them with the devices they name, applies them to the store's current state and
   sets ``last_seq`` to the newest. (The insert's ``ON CONFLICT (store_id, seq) DO NOTHING``
   never fires under the row lock, which only ever lets a batch insert seqs after
   ``last_seq``; the row lock, not it, keeps each event single.)

So the events and the state they produce commit together or not at all, and shippers of one
store (a repeated ``ship``, two at once, one resuming after a kill -9) queue on the row lock
and each starts where the previous one committed: no event is sent twice or skipped.

**Gaps.** Node seqs are dense (``storage/sql/ship.py``): a number missing after ``last_seq``
is an event ``prune_history`` removed before it was shipped. The batch then cannot be applied
(the state after it is unknown); instead the node's whole current state is read in one read
transaction and replaces the store's central state, recorded in ``fleet_snapshots``; the
events the node still keeps in the gap are stored as history, and shipping goes on from the
newest seq the snapshot covers.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from podstore.errors import FleetError, InvalidInputError
from podstore.fleet import db, migrate
from podstore.fleet import sql as q
from podstore.fleet.urls import FleetURL, resolve
from podstore.rules import validate
from podstore.rules.times import format_ts
from podstore.sqlite.connection import ConnectOptions, connect
from podstore.sqlite.sessions import read_transaction
from podstore.storage import entries as entry_store
from podstore.storage.events import numa_json
from podstore.storage.sql import ship as node_sql
from podstore.store import PodStore

if TYPE_CHECKING:
    import sqlalchemy

log = logging.getLogger("podstore.fleet")

#: Events per batch (one PostgreSQL transaction, one node read transaction each).
DEFAULT_BATCH = 5000

EventRow = tuple[int, str, str, str | None, str | None, str, str | None]


@dataclass(frozen=True, slots=True)
class ShipReport:
    """What one :func:`ship` call did.

    ``shipped``: events this call added to the fleet database (its own, not another
    shipper's). ``snapshots``: gaps healed with a snapshot of the node's current state, and
    ``missing``: the events the node had pruned before they were shipped. ``last_seq``: the
    newest node seq the fleet database holds for the store when the call ended.
    """

    store_id: str
    node: str
    url: str
    shipped: int
    batches: int
    snapshots: int
    missing: int
    last_seq: int


@dataclass(slots=True)
class _Batch:
    high_water: int
    events: list[EventRow]
    devices: list[tuple[int, str]]


@dataclass(slots=True)
class _Snapshot:
    at_seq: int
    ts: str
    entries: list[tuple[str, str, str, str | None]]
    registered: list[tuple[str, str | None]]
    kept: list[EventRow]
    kept_devices: list[tuple[int, str]]


def _read_batch(conn: sqlite3.Connection, after: int, limit: int) -> _Batch:
    with read_transaction(conn):
        high_water = int(conn.execute(node_sql.HIGH_WATER).fetchone()[0])
        events: list[EventRow] = conn.execute(node_sql.EVENTS_AFTER, (after, limit)).fetchall()
        devices: list[tuple[int, str]] = (
            conn.execute(node_sql.EVENT_DEVICES_BETWEEN, (after, events[-1][0])).fetchall()
            if events
            else []
        )
    return _Batch(high_water, events, devices)


def _has_gap(batch: _Batch, after: int, limit: int) -> bool:
    """True when an event after ``after`` that the batch should hold was pruned."""
    n = len(batch.events)
    if n and (batch.events[0][0] != after + 1 or batch.events[-1][0] != after + n):
        return True  # seqs are increasing: first and last in place means none in between lost
    # A short batch ends the log: newer numbers were assigned and pruned (deletes at the end).
    return n < limit and batch.high_water != after + n


def _read_snapshot(conn: sqlite3.Connection, after: int) -> _Snapshot:
    with read_transaction(conn):
        at_seq = int(conn.execute(node_sql.HIGH_WATER).fetchone()[0])
        entries = [
            (e.pod_uid, e.container_name, e.resource_name, numa_json(e.device_ids))
            for e in entry_store.read_entries(conn)
        ]
        registered = [
            (resource, None if ids is None else _json_list(ids))
            for resource, ids in entry_store.current_registered(conn).items()
        ]
        kept: list[EventRow] = conn.execute(node_sql.EVENTS_BETWEEN, (after, at_seq)).fetchall()
        kept_devices: list[tuple[int, str]] = conn.execute(
            node_sql.EVENT_DEVICES_BETWEEN, (after, at_seq)
        ).fetchall()
        row = conn.execute(node_sql.TS_THROUGH, (at_seq,)).fetchone()
    ts = str(row[0]) if row is not None else format_ts(datetime.now(UTC))
    return _Snapshot(at_seq, ts, entries, registered, kept, kept_devices)


def _json_list(ids: Sequence[str]) -> str:
    return _JSON.encode(list(ids))


def _records(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as the JSON array of objects ``json_to_recordset`` unpacks (``:rows``)."""
    return _JSON.encode([dict(zip(names, row, strict=True)) for row in rows])


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ALLOCATION_NAMES = (
    "pod_uid",
    "container",
    "resource",
    "seq",
    "numa_node",
    "position",
    "device_id",
)
_EVENT_NAMES = ("seq", "ts", "op", "pod_uid", "container", "resource", "device_ids", "devices")


def _with_devices(
    events: Sequence[EventRow], devices: Sequence[tuple[int, str]]
) -> list[tuple[Any, ...]]:
    """Each event row with the list of devices it names (``devices`` in seq order)."""
    named = {seq: [d for _, d in group] for seq, group in groupby(devices, key=itemgetter(0))}
    return [(*e, named.get(e[0], [])) for e in events]


class _Unregistered:
    """The marker of a resource whose last event left the registered devices."""


UNREGISTERED = _Unregistered()

#: An entry's new state: (NUMA map JSON, seq of the event that set it), or None: deleted.
EntryState = tuple[str | None, int] | None
Key = tuple[str, str, str]


def _run_batch(
    pg: sqlalchemy.Connection,
    store_id: str,
    last_seq: int,
    events: Sequence[EventRow] = (),
    devices: Sequence[tuple[int, str]] = (),
    entries: dict[Key, EntryState] | None = None,
    registered: dict[str, str | _Unregistered | None] | None = None,
) -> int:
    """One APPLY_BATCH: insert ``events`` (and the ``devices`` they name), bring the entries
    and registered resources given to their new state, set last_seq. Returns the number of
    events inserted."""
    from sqlalchemy import text

    entries = entries or {}
    registered = registered or {}
    touched = [(*k, None, None) if v is None else (*k, v[0], v[1]) for k, v in entries.items()]
    # Device rows in the node's order: NUMA keys as in the map (ascending), list positions.
    # The maps are decoded in one json.loads: one call per map costs more than the parsing.
    live = [
        (key, numa_text, seq)
        for key, state in entries.items()
        if state is not None
        for numa_text, seq in (state,)
        if numa_text is not None
    ]
    maps = json.loads("[" + ",".join(t for _, t, _ in live) + "]") if live else []
    held = [
        (pod, container, resource, seq, int(numa), position, device)
        for ((pod, container, resource), _, seq), numa_map in zip(live, maps, strict=True)
        for numa, ids in numa_map.items()
        for position, device in enumerate(ids or ())
    ]
    params = {
        "store_id": store_id,
        "last_seq": last_seq,
        "events": _records(_EVENT_NAMES, _with_devices(events, devices)),
        "entries": _records(("pod_uid", "container", "resource", "device_ids", "seq"), touched),
        "allocations": _records(_ALLOCATION_NAMES, held),
        "gone": _JSON.encode([r for r, v in registered.items() if isinstance(v, _Unregistered)]),
        "registered": _records(
            ("resource", "device_ids"),
            [(r, v) for r, v in registered.items() if not isinstance(v, _Unregistered)],
        ),
    }
    return int(pg.execute(text(q.APPLY_BATCH), params).scalar_one())


def _apply(pg: sqlalchemy.Connection, store_id: str, batch: _Batch) -> int:
    """Insert the batch's events and bring the store's current state past them: each entry
    (and registered resource) takes the state of its last event in the batch."""
    entries: dict[Key, EntryState] = {}
    registered: dict[str, str | _Unregistered | None] = {}
    for seq, _ts, op, pod, container, resource, ids in batch.events:
        if pod is None:
            registered[resource] = UNREGISTERED if op == "unregistered" else ids
        else:
            assert container is not None
            entries[(pod, container, resource)] = None if op == "delete" else (ids, seq)
    last = batch.events[-1][0]
    return _run_batch(pg, store_id, last, batch.events, batch.devices, entries, registered)


def _apply_snapshot(pg: sqlalchemy.Connection, store_id: str, after: int, snap: _Snapshot) -> int:
    """Replace the store's central state with the snapshot and record it; returns the number
    of kept history events stored with it."""
    from sqlalchemy import text

    sid = {"store_id": store_id}
    for statement in q.CLEAR_STATE:
        pg.execute(text(statement), sid)
    _run_batch(
        pg,
        store_id,
        snap.at_seq,
        entries={(p, c, r): (ids, snap.at_seq) for p, c, r, ids in snap.entries},
        registered=dict(snap.registered),
    )
    missing = snap.at_seq - after - len(snap.kept)
    pg.execute(
        text(q.INSERT_SNAPSHOT),
        {
            **sid,
            "at_seq": snap.at_seq,
            "after_seq": after,
            "missing_events": missing,
            "entries": len(snap.entries),
            "registered": len(snap.registered),
            "ts": snap.ts,
        },
    )
    pg.execute(text(q.INSERT_SNAPSHOT_DEVICES), {**sid, "at_seq": snap.at_seq})
    inserted = 0
    # The events the node kept in the gap are history only: the snapshot is their state.
    for start in range(0, len(snap.kept), DEFAULT_BATCH):
        chunk = snap.kept[start : start + DEFAULT_BATCH]
        lo, hi = chunk[0][0], chunk[-1][0]
        # kept_devices is in seq order (EVENT_DEVICES_BETWEEN): slice it, never rescan it.
        first = bisect_left(snap.kept_devices, lo, key=itemgetter(0))
        devices = snap.kept_devices[first : bisect_right(snap.kept_devices, hi, key=itemgetter(0))]
        inserted += _run_batch(pg, store_id, snap.at_seq, chunk, devices)
    return inserted


@dataclass(slots=True)
class _Totals:
    shipped: int = 0
    batches: int = 0
    snapshots: int = 0
    missing: int = 0
    last: int = 0


def _ship(store: PodStore, target: FleetURL, node: str, batch_size: int, t: _Totals) -> None:
    """The batches of one :func:`ship` (run again whole if a pooled connection had died)."""
    from sqlalchemy import text

    conn = connect(ConnectOptions(path=store.path, readonly=True))
    store_id = store.store_id
    try:
        # One pooled connection for the whole call, one transaction per batch.
        with db.connection(target) as pg:
            while True:
                # What this batch did counts once its transaction has committed.
                shipped = batches = snapshots = missing = 0
                with pg.begin():
                    migrate.check_schema(pg, target)  # asks the database once per process
                    params = {"store_id": store_id, "node": node}
                    last = int(pg.execute(text(q.LOCK_STORE), params).scalar_one())
                    batch = _read_batch(conn, last, batch_size)
                    if batch.high_water < last:
                        raise FleetError(
                            f"fleet database {target.shown} holds events of store {store_id} "
                            f"up to seq {last}, but the store's history ends at seq "
                            f"{batch.high_water}: the store file was replaced by an older "
                            "copy of itself; ship from the current file, or give the copy a "
                            "new identity"
                        )
                    gap_found = _has_gap(batch, last, batch_size)
                    if gap_found:
                        snap = _read_snapshot(conn, last)
                        shipped = _apply_snapshot(pg, store_id, last, snap)
                        snapshots = 1
                        missing = gap = snap.at_seq - last - len(snap.kept)
                        log.warning(
                            "store %s (node %s): %d events after seq %d were pruned before "
                            "they were shipped; sent a snapshot of the current state at seq "
                            "%d (%d entries) to %s",
                            store_id,
                            node,
                            gap,
                            last,
                            snap.at_seq,
                            len(snap.entries),
                            target.shown,
                        )
                        last = snap.at_seq
                    elif batch.events:
                        shipped = _apply(pg, store_id, batch)
                        batches = 1
                        last = batch.events[-1][0]
                    else:
                        pg.execute(text(q.MARK_SHIPPED), {"store_id": store_id, "last_seq": last})
                t.shipped += shipped
                t.batches += batches
                t.snapshots += snapshots
                t.missing += missing
                t.last = last
                # A full batch may have more behind it, and after a snapshot the events
                # written since it are read next; anything else was the end of the log.
                if not gap_found and len(batch.events) < batch_size:
                    break
    finally:
        conn.close()


def ship(
    store: PodStore, url: str | FleetURL | None, *, node: str, batch_size: int = DEFAULT_BATCH
) -> ShipReport:
    """Ship every event of ``store`` that the fleet database at ``url`` lacks, and the state
    they produce; returns what was done.

    ``url`` is a ``postgresql://`` URL (None: ``$PODSTORE_FLEET_URL``); ``node`` the name the
    fleet shows for this store (``podstore ship`` defaults it to the host name). The store is
    only read, on a read-only connection of its own, one read transaction per batch.

    Raises FleetUnavailableError when PostgreSQL cannot be reached or the connection breaks
    (whatever batch was open there is rolled back; the batches committed before stay),
    FleetError when its schema is missing or not at this podstore's revision, or when the
    fleet database holds newer events for this store than the store has (the file was
    replaced by an older copy), and InvalidInputError for a bad argument.
    """
    target = resolve(url)
    node = validate.text(node, "node")
    if not node:
        raise InvalidInputError("node: expected a non-empty name")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size: expected a positive int, got {batch_size!r}")
    store_id = store.store_id
    totals = _Totals()
    db.retrying(target, lambda: _ship(store, target, node, batch_size, totals))
    shipped, batches, snapshots, missing, last = (
        totals.shipped,
        totals.batches,
        totals.snapshots,
        totals.missing,
        totals.last,
    )
    log.info(
        "shipped %d events of store %s (node %s) to %s; it holds seq %d",
        shipped,
        store_id,
        node,
        target.shown,
        last,
    )
    return ShipReport(store_id, node, target.shown, shipped, batches, snapshots, missing, last)
