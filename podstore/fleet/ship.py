"""Shipping a node's history to the fleet database, exactly once, on a chain the fleet checks
(docs/fleet.md, "Shipping, exactly once" and "Gaps").

Each batch is one transaction: ``fleet_ship_open`` locks the store's row (shippers of one
store queue there) and gives ``last_seq``; the events after it are read in one reader
snapshot; ``fleet_ship_batch`` checks their chain and inserts them. Node seqs are dense, so a
missing number is an event pruned before it was shipped: the node's whole current state is
sent instead (``fleet_ship_snapshot``) and shipping goes on after it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podstore.errors import FleetRefusedError, InvalidInputError, PodStoreError
from podstore.fleet import db, migrate
from podstore.fleet import sql as q
from podstore.fleet.status import ShippingStatus
from podstore.fleet.urls import FleetURL, resolve
from podstore.metrics.stats import lag
from podstore.pure import validate
from podstore.reading import EventRow
from podstore.store import PodStore

if TYPE_CHECKING:
    from podstore.reading import Reader

log = logging.getLogger("podstore.fleet")

#: Events per batch (one PostgreSQL transaction, one node snapshot each).
DEFAULT_BATCH = 5000


@dataclass(frozen=True, slots=True)
class ShipReport:
    """What one :func:`ship` call did: events it added (not another shipper's), gaps healed
    with a snapshot and the events ``missing`` there, and the newest seq the fleet then held."""

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
    prev: bytes


def _has_gap(batch: _Batch, after: int, limit: int) -> bool:
    """True when an event after ``after`` that the batch should hold was pruned."""
    n = len(batch.events)
    if n and (batch.events[0][0] != after + 1 or batch.events[-1][0] != after + n):
        return True  # seqs are increasing: first and last in place means none in between lost
    # A short batch ends the log: newer numbers were assigned and pruned (deletes at the end).
    return n < limit and batch.high_water != after + n


def _read_batch(reader: Reader, after: int, limit: int) -> _Batch:
    high_water = reader.high_water()
    events = reader.events_after(after, limit)
    if events and events[0][0] == after + 1:
        prev = reader.chain_prev(after + 1)
    else:
        # Nothing new (or a gap, or a history that ends before `after`): the value the chain
        # stands at, which the fleet compares with its own head.
        prev = reader.chain_head()[1]
    return _Batch(high_water, events, prev)


def _read_snapshot(reader: Reader, after: int) -> tuple[dict[str, Any], int]:
    """The node's current state as ``fleet_ship_snapshot`` takes it (the other managers' items
    too, revision f0003: replaced whole with the device state), and how many entries."""
    at_seq, head = reader.chain_head()
    # The time the state is observed: taken inside the snapshot, on the history's own clock.
    ts = reader.clock()
    entries, registered = reader.current_state()
    kept = reader.events_between(after, at_seq)
    kept_seqs = {e[0] for e in kept}
    links = [(e[0], reader.chain_prev(e[0]).hex()) for e in kept if e[0] - 1 not in kept_seqs]
    kept_text, kept_hashes = _events_wire(kept)
    item_fields = ("kind", "pod_uid", "container", "resource", "value")
    params = {
        "at_seq": at_seq,
        "ts": ts,
        "head": head,
        "entries": _records(("pod_uid", "container", "resource", "device_ids"), entries),
        "registered": _records(("resource", "device_ids"), registered),
        "kept": kept_text,
        "kept_hashes": kept_hashes,
        "links": _records(("seq", "prev"), links),
        "node_items": _records(item_fields, reader.node_items()),
    }
    return params, len(entries)


def _read_physical(reader: Reader) -> dict[str, str]:
    """The node's CDI devices and entry responses as ``fleet_ship_physical`` takes them: they
    write no history, so they travel as current state (fleet revision f0008)."""
    cdi, responses = reader.physical_facts()
    return {
        "cdi": _records(("spec_path", "name", "host_path"), cdi),
        "responses": _records(("pod_uid", "container", "resource", "kind", "value"), responses),
    }


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _records(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return _JSON.encode([dict(zip(names, row, strict=True)) for row in rows])


def _events_wire(events: Sequence[EventRow]) -> tuple[str, bytes]:
    """Events as ``fleet_events_in`` takes them: a JSON array of their first eight fields,
    and their 32-byte hashes apart, in the same order."""
    return _JSON.encode([e[:8] for e in events]), b"".join(e[8] for e in events)


def _refusal(message: str) -> FleetRefusedError:
    if "another node" in message:
        reason = "another node"
    elif "was retired" in message:
        reason = "retired"
    else:
        reason = "diverged"
    return FleetRefusedError(reason, message)


@dataclass(slots=True)
class _Totals:
    shipped: int = 0
    batches: int = 0
    snapshots: int = 0
    missing: int = 0
    last: int | None = None
    refused: str | None = None


def _ship(store: PodStore, target: FleetURL, node: str, batch_size: int, t: _Totals) -> None:
    """The batches of one :func:`ship` (run again whole if a pooled connection had died)."""
    from sqlalchemy import text

    store_id = store.store_id
    ids = {"store_id": store_id, "node": node}
    with db.connection(target) as pg:
        while True:
            # What this batch did counts once its transaction has committed.
            shipped = batches = snapshots = missing = 0
            with pg.begin():
                migrate.check_schema(pg, target)  # asks the database once per process
                held, _head, refused = pg.execute(text(q.SHIP_OPEN), ids).one()
                if refused is not None:
                    # A refused store's seq is not told (f0005): another node's is not ours.
                    t.refused = str(refused)
                    return
                last = int(held)
                with store.reader() as reader:
                    batch = _read_batch(reader, last, batch_size)
                    gap_found = batch.high_water > last and _has_gap(batch, last, batch_size)
                    snap = _read_snapshot(reader, last) if gap_found else None
                    # The last transaction of a ship sends the physical-device facts, read in
                    # the snapshot of its events: the fleet's state and facts then agree.
                    final = not gap_found and len(batch.events) < batch_size
                    facts = _read_physical(reader) if final else None
                if snap is not None:
                    params, entries = snap
                    snapshot_sql = text(q.SHIP_SNAPSHOT)
                    shipped, missing, refused = pg.execute(snapshot_sql, {**ids, **params}).one()
                    shipped, missing = int(shipped), int(missing)
                    if refused is None:
                        snapshots = 1
                        log.warning(
                            "store %s (node %s): %d events after seq %d were pruned before "
                            "they were shipped; sent a snapshot of the current state at "
                            "seq %d (%d entries) to %s",
                            store_id,
                            node,
                            missing,
                            last,
                            params["at_seq"],
                            entries,
                            target.shown,
                        )
                        last = params["at_seq"]
                else:
                    events, hashes = _events_wire(batch.events)
                    params = {
                        **ids,
                        "node_high": batch.high_water,
                        "prev": batch.prev,
                        "events": events,
                        "hashes": hashes,
                    }
                    shipped, refused = pg.execute(text(q.SHIP_BATCH), params).one()
                    shipped = int(shipped)
                    if refused is None and batch.events:
                        batches = 1
                        last = batch.events[-1][0]
                if refused is None and facts is not None:
                    _changed, refused = pg.execute(text(q.SHIP_PHYSICAL), {**ids, **facts}).one()
                # A refusal leaves the block normally: its count commits, nothing else.
            t.last = last
            if refused is not None:
                t.refused = str(refused)
                return
            t.shipped += shipped
            t.batches += batches
            t.snapshots += snapshots
            t.missing += missing
            # A full batch may have more behind it, and after a snapshot the events written
            # since it are read next; anything else was the end of the log.
            if final:
                return


def _lag(store: PodStore, last: int | None) -> tuple[int | None, float | None]:
    if last is None:
        return None, None
    try:
        return lag(store, last)
    except PodStoreError:
        return None, None


def ship(
    store: PodStore,
    url: str | FleetURL | None,
    *,
    node: str,
    batch_size: int = DEFAULT_BATCH,
    status: ShippingStatus | None = None,
) -> ShipReport:
    """Ship every event of ``store`` the fleet at ``url`` (None: ``$PODSTORE_FLEET_URL``)
    lacks, and the state they produce, as ``node`` (a store belongs to its first shipper);
    ``status``, when given, is filled at the end whether it succeeded or not.

    Raises FleetRefusedError when the fleet refused the store (another node's, a diverged
    chain, or retired; only the refusal's count is written), FleetUnavailableError when
    PostgreSQL cannot be reached or the connection breaks (the open batch is rolled back,
    those committed stay), FleetError for a schema not at this revision, InvalidInputError
    for a bad argument.
    """
    target = resolve(url)
    node = validate.text(node, "node")
    if not node:
        raise InvalidInputError("node: expected a non-empty name")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size: expected a positive int, got {batch_size!r}")
    store_id = store.store_id
    totals = _Totals()
    try:
        db.retrying(target, lambda: _ship(store, target, node, batch_size, totals))
        if totals.refused is not None:
            raise _refusal(totals.refused)
    except PodStoreError as exc:
        if status is not None:
            known = totals.last if totals.last is not None else status.snapshot().last_seq
            refused = isinstance(exc, FleetRefusedError)
            status.failed(str(exc), *_lag(store, known), refused=refused, last_seq=totals.last)
        raise
    last = totals.last if totals.last is not None else 0
    if status is not None:
        status.succeeded(last, *_lag(store, last))
    log.info(
        "shipped %d events of store %s (node %s) to %s; it holds seq %d",
        totals.shipped,
        store_id,
        node,
        target.shown,
        last,
    )
    return ShipReport(
        store_id,
        node,
        target.shown,
        totals.shipped,
        totals.batches,
        totals.snapshots,
        totals.missing,
        last,
    )
