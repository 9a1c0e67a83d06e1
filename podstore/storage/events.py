"""The allocation history: an append-only event log written with every change, and its replay.

Every change to an entry or to the registered devices appends rows to ``allocation_events``
(and, per device it names, to ``allocation_event_devices``) inside the change's own
transaction, so a rolled-back change leaves no event and a committed one always has its event.

Operations (``allocation_events.op``):

=============  ==================================================================================
insert         ``PodStore.insert`` created the (pod, container, resource) entry
replace        ``PodStore.insert`` over an existing entry (the entry keeps its position)
import         the entry was written from checkpoint data: ``import_checkpoint`` (new or over
               an existing entry) or ``from_checkpoint_data``
backfill       the entry existed when revision 0002 created the log (one per entry, at upgrade)
delete         the entry was removed: ``PodStore.delete`` (one event per entry of each pod), or
               a non-merge import dropping an entry its file does not hold; ``device_ids`` are
               the devices it had
registered     a resource's registered device list was set or changed (also at backfill);
               ``pod_uid`` and ``container`` are NULL, ``device_ids`` the new list
unregistered   a resource left the registered devices; ``device_ids`` its last list
=============  ==================================================================================

``device_ids`` is JSON: for entry events the NUMA map as in a checkpoint (``{"0": ["a"],
"-1": ["b"]}``, keys in ascending numeric order, NULL for a null map); for registered events a
list (NULL for a null list). Replaying the log from empty (:func:`replay`) reproduces the
store's entries and registered devices; ``prune_history`` keeps that true.

Timestamps are stored as ``rules/times.py`` describes. An event's time is never before its
predecessor's, even if the wall clock steps back: ``seq`` order and time order agree, which
time queries rely on.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podstore.rules.times import format_ts, parse_ts
from podstore.storage.sql import events as sql
from podstore.types import AllocationEvent, DevicesPerNUMA

Key = tuple[str, str, str]


def utcnow() -> datetime:
    """The clock events are stamped with (tests substitute it to get fixed times)."""
    return datetime.now(UTC)


# ---- writing events --------------------------------------------------------------------------


@dataclass(slots=True)
class Pending:
    """Events to append in one go (one read of the log's tail, two executemany calls)."""

    events: list[tuple[str, str | None, str | None, str, str | None, Iterable[str]]] = field(
        default_factory=list
    )

    def entry(self, op: str, key: Key, devices: DevicesPerNUMA | None) -> None:
        ids: list[str] = [d for lst in devices.values() if lst for d in lst] if devices else []
        self.events.append((op, key[0], key[1], key[2], numa_json(devices), ids))

    def registered(self, op: str, resource: str, ids: Sequence[str] | None) -> None:
        text = None if ids is None else _JSON.encode(list(ids))
        self.events.append((op, None, None, resource, text, ids or ()))

    def write(
        self, conn: sqlite3.Connection, stamp: tuple[int, str] | None = None
    ) -> tuple[int, str]:
        """Append the queued events, from ``stamp`` (the first seq and the time, as
        :func:`next_stamp` gives them) or from a fresh one; returns the stamp that follows."""
        if not self.events:
            return stamp if stamp is not None else next_stamp(conn)
        first, ts = stamp if stamp is not None else next_stamp(conn)
        rows: list[tuple[int, str, str, str | None, str | None, str, str | None]] = []
        devices: list[tuple[int, str]] = []
        for seq, (op, pod, container, resource, text, ids) in enumerate(self.events, start=first):
            rows.append((seq, ts, op, pod, container, resource, text))
            devices.extend((seq, d) for d in ids)
        conn.executemany(sql.INSERT_EVENT, rows)
        if devices:
            conn.executemany(sql.INSERT_EVENT_DEVICE, devices)
        after = (first + len(self.events), ts)
        self.events.clear()
        return after


def next_stamp(conn: sqlite3.Connection) -> tuple[int, str]:
    """The next seq and the time to stamp events with now."""
    last_seq, last_ts = conn.execute(sql.LAST).fetchone()
    ts = format_ts(utcnow())
    if last_ts is not None and last_ts > ts:
        ts = last_ts  # the clock stepped back: keep time order equal to seq order
    return int(last_seq) + 1, ts


def append_entry(
    conn: sqlite3.Connection, op: str, key: Key, devices: DevicesPerNUMA | None
) -> None:
    """Append one entry event: what ``Pending`` does for one event, with less Python (the
    path of every ``insert``)."""
    seq, ts = next_stamp(conn)
    conn.execute(sql.INSERT_EVENT, (seq, ts, op, key[0], key[1], key[2], numa_json(devices)))
    if devices:
        ids = [(seq, d) for lst in devices.values() if lst for d in lst]
        if ids:
            conn.executemany(sql.INSERT_EVENT_DEVICE, ids)


def prune(conn: sqlite3.Connection, before: str) -> int:
    """``prune_history``: delete the events before ``before`` that nothing needs (see
    ``sql.PRUNE``); returns how many went. When the newest events go too, their highest seq
    is kept as the floor the next seq is taken above, so no seq is ever handed out twice."""
    top = int(conn.execute(sql.LAST).fetchone()[0])
    conn.execute(sql.PRUNE, {"before": before})
    # Not cursor.rowcount: pysqlite reports -1 for a statement that starts with WITH.
    removed = int(conn.execute("SELECT changes()").fetchone()[0])
    if removed and int(conn.execute(sql.LAST).fetchone()[0]) < top:
        conn.execute(sql.SET_SEQ_FLOOR, (top,))
    return removed


# One encoder, reused: json.dumps with non-default options builds a new one per call, which
# costs more than the encoding itself on a 100,000-entry import.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def numa_json(devices: Mapping[int, Sequence[str] | None] | None) -> str | None:
    """The NUMA map as compact JSON with numeric key order; None for a null map."""
    if devices is None:
        return None
    return _JSON.encode(
        {str(node): None if ids is None else list(ids) for node, ids in sorted(devices.items())}
    )


def _numa_from_json(text: str | None) -> DevicesPerNUMA | None:
    if text is None:
        return None
    raw = json.loads(text)
    return {int(k): v for k, v in raw.items()}


def registered_changes(
    old: Mapping[str, list[str] | None],
    registered: Mapping[str, list[str] | None] | None,
    *,
    whole: bool,
    pending: Pending,
) -> None:
    """Queue events for turning the registered devices ``old`` into the new ones (the whole
    mapping when ``whole``, else resource by resource)."""
    new: dict[str, list[str] | None] = {} if whole else dict(old)
    new.update(registered or {})
    for resource in sorted(old.keys() - new.keys()):
        pending.registered("unregistered", resource, old[resource])
    for resource, ids in new.items():
        if resource not in old or old[resource] != ids:
            pending.registered("registered", resource, ids)


# ---- reading events --------------------------------------------------------------------------


def to_event(row: Sequence[Any]) -> AllocationEvent:
    """An ``allocation_events`` row (in ``sql.history_sql`` column order) as an event."""
    seq, ts, op, pod, container, resource, text = row
    ids: DevicesPerNUMA | list[str] | None
    if pod is None:
        ids = None if text is None else list(json.loads(text))
    else:
        ids = _numa_from_json(text)
    return AllocationEvent(int(seq), parse_ts(ts), op, pod, container, resource, ids)


# ---- replay ------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayState:
    """What a replay of the event log ends in."""

    entries: dict[Key, DevicesPerNUMA | None] = field(default_factory=dict)
    registered: dict[str, list[str] | None] = field(default_factory=dict)


def replay(events: Iterable[AllocationEvent], state: ReplayState | None = None) -> ReplayState:
    """Apply events in order (from empty by default): the state they describe.

    After any sequence of changes, ``replay(store.history())`` equals the store's entries (key
    → NUMA map) and registered devices; the same holds after ``prune_history``.
    """
    out = state if state is not None else ReplayState()
    for ev in events:
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
