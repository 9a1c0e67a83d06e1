"""The allocation history: events appended inside each change's own transaction, and replay
(the SQL contract: docs/sql.md, "allocation_events", "The hash chain").

An event's time is never before its predecessor's, even when the wall clock steps back: time
queries rely on seq order being time order. Removing the newest events with their links is
not detectable on the node alone: the fleet is the witness.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podstore.errors import InvalidInputError, StoreCorruptError
from podstore.pure import chain
from podstore.pure.times import format_ts, parse_ts
from podstore.storage.node import codec as node_codec
from podstore.storage.ops import END_EVENT_OPS
from podstore.storage.sql import events as sql
from podstore.storage.sql import intervals as intervals_sql
from podstore.types import AllocationEvent, DevicesPerNUMA

Key = tuple[str, str, str]


def utcnow() -> datetime:
    """The clock events are stamped with (tests substitute it to get fixed times)."""
    return datetime.now(UTC)


# ---- writing events --------------------------------------------------------------------------

#: Where the next event goes: its seq, its time and the hash it chains from.
Stamp = tuple[int, str, bytes]

# One queued event: op, pod, container, resource, device_ids text, the devices it lists, the
# released text and the devices it released (both empty when device spans record them).
_Queued = tuple[
    str, str | None, str | None, str, str | None, Iterable[str], str | None, Sequence[str]
]


@dataclass(slots=True)
class Pending:
    """Events to append in one go; the i-th queued gets seq ``stamp[0] + i`` of the stamp
    :meth:`write` starts at."""

    events: list[_Queued] = field(default_factory=list)

    def entry(
        self,
        op: str,
        key: Key,
        devices: DevicesPerNUMA | None,
        released: Sequence[str] = (),
        *,
        spans: bool = False,
    ) -> None:
        """Queue an entry event; ``released``: sorted. ``spans``: the caller records its
        devices as device spans, so it gets no event_device_rows."""
        text = JSON.encode(list(released)) if released else None
        if spans:
            self.events.append((op, key[0], key[1], key[2], numa_json(devices), (), text, ()))
            return
        ids: list[str] = [d for lst in devices.values() if lst for d in lst] if devices else []
        self.events.append((op, key[0], key[1], key[2], numa_json(devices), ids, text, released))

    def registered(self, op: str, resource: str, ids: Sequence[str] | None) -> None:
        text = None if ids is None else JSON.encode(list(ids))
        self.events.append((op, None, None, resource, text, ids or (), None, ()))

    def node(
        self,
        op: str,
        key: tuple[str | None, str | None, str],
        payload: str | None,
        devices: Sequence[str] = (),
        released: Sequence[str] = (),
    ) -> None:
        """Queue a node manager event; ``payload`` is its ``device_ids`` text."""
        text = JSON.encode(list(released)) if released else None
        self.events.append((op, key[0], key[1], key[2], payload, devices, text, released))

    def write(self, conn: sqlite3.Connection, stamp: Stamp | None = None) -> Stamp:
        """Append the queued events from ``stamp`` (default: a fresh one); returns the next."""
        if not self.events:
            return stamp if stamp is not None else next_stamp(conn)
        seq, ts, prev = stamp if stamp is not None else next_stamp(conn)
        link = chain.link
        rows: list[tuple[int, str, str, str | None, str | None, str, str | None, str | None, bytes]]
        rows = []
        devices: list[tuple[int, str, int]] = []
        for op, pod, container, resource, text, ids, gone_text, gone in self.events:
            prev = link(prev, seq, ts, op, pod, container, resource, text, gone_text)
            rows.append((seq, ts, op, pod, container, resource, text, gone_text, prev))
            devices.extend((seq, d, 0) for d in ids)
            if gone:
                devices.extend((seq, d, 1) for d in gone)
            seq += 1
        conn.executemany(sql.INSERT_EVENT, rows)
        if devices:
            conn.executemany(sql.INSERT_EVENT_DEVICE, devices)
        self.events.clear()
        return seq, ts, prev


def next_stamp(conn: sqlite3.Connection) -> Stamp:
    """The next seq, time and the hash it chains from (one statement unless the newest events
    were pruned or none was written)."""
    row = conn.execute(sql.LAST).fetchone()
    if row is not None and (row[3] is None or int(row[3]) <= int(row[0])):
        last_seq, last_ts, prev = int(row[0]), row[1], bytes(row[2])
    else:
        last_seq, prev = head(conn)
        last_ts = None if row is None else row[1]
    ts = format_ts(utcnow())
    if last_ts is not None and last_ts > ts:
        ts = last_ts  # the clock stepped back: keep time order equal to seq order
    return last_seq + 1, ts, prev


def append_entry(
    conn: sqlite3.Connection,
    stamp: Stamp,
    op: str,
    key: Key,
    devices: DevicesPerNUMA | None,
    released: Sequence[str] = (),
) -> None:
    """``Pending.entry(..., spans=True)`` for one event at ``stamp``, with less Python (the
    path of every ``insert``)."""
    seq, ts, prev = stamp
    text = numa_json(devices)
    gone = JSON.encode(list(released)) if released else None
    digest = chain.link(prev, seq, ts, op, key[0], key[1], key[2], text, gone)
    conn.execute(sql.INSERT_EVENT, (seq, ts, op, key[0], key[1], key[2], text, gone, digest))


def released_devices(old: Iterable[str], new: DevicesPerNUMA | None) -> list[str]:
    """The devices of ``old`` that ``new`` no longer lists, sorted by code point."""
    kept = {d for lst in new.values() if lst for d in lst} if new else set()
    return sorted(set(old) - kept)


def prune(conn: sqlite3.Connection, before: str) -> int:
    """``prune_history``: delete the events before ``before`` that nothing needs; returns how
    many went. Links keep the chain checkable; when the newest go, their seq becomes the floor
    so that no seq is handed out twice."""
    for statement in sql.SETUP:
        conn.execute(statement)
    conn.execute(sql.PRUNE_CLEAR)
    try:
        conn.execute(sql.PRUNE, {"before": before})
        doomed = conn.execute(sql.PRUNE_COUNT).fetchone()[0] > 0
        # The device-seconds counter must not fall: what the intervals lose is carried.
        until = format_ts(utcnow())
        held = _interval_seconds(conn, until) if doomed else {}
        top = int(conn.execute(sql.HIGH_WATER).fetchone()[0])
        conn.execute(sql.PRUNE_LINKS, {"high_water": top})
        conn.execute(sql.PRUNE_UNLINK)
        removed = conn.execute(sql.PRUNE_DELETE).rowcount
        if removed:
            conn.execute(sql.PRUNE_SPANS)
            kept = _interval_seconds(conn, until)
            conn.executemany(
                intervals_sql.ADD_PRUNED_SECONDS,
                [(r, ns, s - kept.get((r, ns), 0.0)) for (r, ns), s in held.items()
                 if s != kept.get((r, ns), 0.0)]
                + [(r, ns, -s) for (r, ns), s in kept.items() if (r, ns) not in held],
            )  # fmt: skip
        if removed and conn.execute(sql.EVENT_HASH, (top,)).fetchone() is None:
            conn.execute(sql.SET_SEQ_FLOOR, (top,))
    finally:
        conn.execute(sql.PRUNE_CLEAR)
    return int(removed)


def _interval_seconds(conn: sqlite3.Connection, until: str) -> dict[tuple[str, str], float]:
    rows = conn.execute(intervals_sql.INTERVAL_SECONDS, {"until": until})
    return {(str(r), str(ns)): float(s or 0.0) for r, ns, s in rows}


# ---- the chain's ends ----------------------------------------------------------------------------


def genesis(conn: sqlite3.Connection) -> bytes:
    """The hash before the store's first event (of its current ``store_id``)."""
    row = conn.execute(sql.STORE_ID).fetchone()
    if row is None:  # pragma: no cover - revision 0003 gives every store one
        raise StoreCorruptError("the store has no store_id; run `podstore migrate upgrade`")
    return chain.genesis(str(row[0]))


def prev_hash(conn: sqlite3.Connection, seq: int) -> bytes:
    """The hash event ``seq`` chains from: the genesis, event ``seq - 1``'s hash, or its link.

    Raises StoreCorruptError when neither is there, InvalidInputError for a seq below 1.
    """
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidInputError(f"seq: expected an integer >= 1, got {seq!r}")
    if seq == 1:
        return genesis(conn)
    row = conn.execute(sql.EVENT_HASH, (seq - 1,)).fetchone()
    if row is None:
        row = conn.execute(sql.LINK, (seq,)).fetchone()
    if row is None:
        raise StoreCorruptError(
            f"the history chain is broken before seq {seq}: event {seq - 1} is missing and "
            "no link records its hash (`podstore verify` tells more)"
        )
    return bytes(row[0])


def head(conn: sqlite3.Connection) -> tuple[int, bytes]:
    """The newest seq handed out (0: none) and the hash the chain stands at there.

    Raises StoreCorruptError when neither the event nor its link is there.
    """
    seq, link = conn.execute(sql.PRUNED_HEAD).fetchone()
    seq = int(seq)
    if seq == 0:
        return 0, genesis(conn)
    row = conn.execute(sql.EVENT_HASH, (seq,)).fetchone()
    if row is not None:
        return seq, bytes(row[0])
    if link is None:
        raise StoreCorruptError(
            f"the history chain has no head: event {seq} (the newest handed out) is missing "
            "and no link records its hash (`podstore verify` tells more)"
        )
    return seq, bytes(link)


#: The compact JSON of the history (and of what a reader returns). One encoder, reused: json.dumps
#: with non-default options builds a new one per call, which costs more than the encoding itself
#: on a 100,000-entry import.
JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def numa_json(devices: Mapping[int, Sequence[str] | None] | None) -> str | None:
    """The NUMA map as compact JSON with numeric key order; None for a null map."""
    if devices is None:
        return None
    return JSON.encode(
        {str(node): None if ids is None else list(ids) for node, ids in sorted(devices.items())}
    )


# ---- reading events --------------------------------------------------------------------------


def to_event(row: Sequence[Any]) -> AllocationEvent:
    """An ``allocation_events`` row (in ``sql.history_sql`` column order) as an event."""
    if node_codec.is_node_op(row[2]) or row[2] in END_EVENT_OPS:
        return node_codec.to_event(row)
    seq, ts, op, pod, container, resource, text, released = row
    ids: DevicesPerNUMA | list[str] | None
    if text is None:
        ids = None
    elif pod is None:
        ids = list(json.loads(text))
    else:
        ids = {int(k): v for k, v in json.loads(text).items()}
    gone: list[str] = [] if released is None else list(json.loads(released))
    return AllocationEvent(int(seq), parse_ts(ts), op, pod, container, resource, ids, gone)


# ---- replay ------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayState:
    """What a replay of the event log ends in."""

    entries: dict[Key, DevicesPerNUMA | None] = field(default_factory=dict)
    registered: dict[str, list[str] | None] = field(default_factory=dict)


def replay(events: Iterable[AllocationEvent], state: ReplayState | None = None) -> ReplayState:
    """The state the events describe, applied in order (from empty by default); replaying
    ``store.history()`` gives the store's entries and registered devices, pruned or not."""
    out = state if state is not None else ReplayState()
    for ev in events:
        if node_codec.is_node_op(ev.op) or ev.op in END_EVENT_OPS:
            continue  # the node's other managers: storage/node/codec.py replays those
        if ev.pod_uid is None:
            if ev.op == "unregistered":
                out.registered.pop(ev.resource_name, None)
            else:
                assert not isinstance(ev.device_ids, dict)
                out.registered[ev.resource_name] = ev.device_ids
            continue
        assert ev.container_name is not None
        key = (ev.pod_uid, ev.container_name, ev.resource_name)
        if ev.op == "delete":
            out.entries.pop(key, None)
        else:
            assert not isinstance(ev.device_ids, list)
            out.entries[key] = ev.device_ids
    return out
