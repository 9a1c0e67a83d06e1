"""The allocation history: an append-only event log written with every change.

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

Timestamps are UTC, ISO 8601 with microseconds and a ``Z`` (``2026-12-02T10:32:00.000000Z``),
so text order is time order. An event's time is never before its predecessor's, even if the
wall clock steps back: ``seq`` order and time order agree, which time queries rely on.
Arguments that take a time accept an aware ``datetime`` (converted to UTC), a naive one (taken
as UTC), a ``date`` (midnight UTC) or an ISO 8601 string (without an offset: UTC).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from podstore import queries as q
from podstore.errors import InvalidInputError
from podstore.types import AllocationEvent, DevicesPerNUMA

Key = tuple[str, str, str]

#: What the time arguments accept (see the module docstring).
TimeArg = datetime | date | str

ENTRY_OPS = ("insert", "replace", "import", "backfill")


def utcnow() -> datetime:
    """The clock events are stamped with (tests substitute it to get fixed times)."""
    return datetime.now(UTC)


# ---- time values -----------------------------------------------------------------------------


def format_ts(value: datetime) -> str:
    """The stored form of an instant: UTC, microseconds, 'Z' (naive means UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def parse_ts(text: str) -> datetime:
    """A stored timestamp as an aware UTC datetime."""
    return datetime.fromisoformat(text)


def parse_time(value: Any, argument: str) -> str:
    """An accepted time argument in stored form. Raises InvalidInputError naming ``argument``."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(
                f"{argument}: {value!r} is not an ISO 8601 time (e.g. 2026-12-02T10:32:00Z)"
            ) from None
    else:
        raise InvalidInputError(
            f"{argument}: expected a datetime or an ISO 8601 string, got {type(value).__name__}"
        )
    try:
        return format_ts(parsed)
    except OverflowError:
        raise InvalidInputError(f"{argument}: {value!r} is out of range in UTC") from None


# ---- writing events --------------------------------------------------------------------------

_LAST = """
    SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'allocation_events'), 0),
           (SELECT ts FROM allocation_events ORDER BY seq DESC LIMIT 1)
"""
_INSERT_EVENT = """
    INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_INSERT_EVENT_DEVICE = """
    INSERT OR IGNORE INTO allocation_event_devices (seq, device_id) VALUES (?, ?)
"""


@dataclass(slots=True)
class Pending:
    """Events to append in one go (one read of the log's tail, two executemany calls)."""

    events: list[tuple[str, str | None, str | None, str, str | None, Iterable[str]]] = field(
        default_factory=list
    )

    def entry(self, op: str, key: Key, devices: DevicesPerNUMA | None) -> None:
        ids: list[str] = [d for lst in (devices or {}).values() for d in lst or ()]
        self.events.append((op, key[0], key[1], key[2], numa_json(devices), ids))

    def registered(self, op: str, resource: str, ids: Sequence[str] | None) -> None:
        text = None if ids is None else _JSON.encode(list(ids))
        self.events.append((op, None, None, resource, text, ids or ()))

    def write(self, conn: sqlite3.Connection) -> None:
        if not self.events:
            return
        last_seq, last_ts = conn.execute(_LAST).fetchone()
        ts = format_ts(utcnow())
        if last_ts is not None and last_ts > ts:
            ts = last_ts  # the clock stepped back: keep time order equal to seq order
        rows: list[tuple[int, str, str, str | None, str | None, str, str | None]] = []
        devices: list[tuple[int, str]] = []
        for seq, (op, pod, container, resource, text, ids) in enumerate(
            self.events, start=int(last_seq) + 1
        ):
            rows.append((seq, ts, op, pod, container, resource, text))
            devices.extend((seq, d) for d in ids)
        conn.executemany(_INSERT_EVENT, rows)
        if devices:
            conn.executemany(_INSERT_EVENT_DEVICE, devices)
        self.events.clear()


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


# Entries with their NUMA maps, for delete events and for comparing a replay with the store:
# device rows and empty-list markers of each allocation, in (allocation, NUMA, position) order.
def _entries_sql(where: str) -> str:
    return f"""
    SELECT a.id, p.uid, c.name, a.resource, a.device_ids_null, d.numa_node, d.position,
           d.device_id, NULL
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    LEFT JOIN allocation_devices d ON d.allocation_id = a.id
    {where}
    UNION ALL
    SELECT a.id, p.uid, c.name, a.resource, a.device_ids_null, e.numa_node, 0, NULL, e.is_null
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    JOIN empty_numa_lists e ON e.allocation_id = a.id
    {where}
    ORDER BY 1, 6, 7
"""


_ALL_ENTRIES = _entries_sql("")
_POD_ENTRIES = _entries_sql("WHERE p.uid = :uid")


def current_entries(
    conn: sqlite3.Connection, pod_uid: str | None = None
) -> dict[Key, DevicesPerNUMA | None]:
    """(pod, container, resource) → NUMA map of every entry (of one pod), in position order."""
    rows = (
        conn.execute(_ALL_ENTRIES)
        if pod_uid is None
        else conn.execute(_POD_ENTRIES, {"uid": pod_uid})
    )
    out: dict[Key, DevicesPerNUMA | None] = {}
    maps: dict[int, DevicesPerNUMA] = {}
    for aid, uid, name, resource, ids_null, node, _pos, device_id, empty_null in rows:
        per_numa = maps.get(aid)
        if per_numa is None:
            per_numa = maps[aid] = {}
            out[(uid, name, resource)] = None if ids_null else per_numa
        if device_id is not None:
            lst = per_numa.setdefault(int(node), [])
            assert lst is not None
            lst.append(device_id)
        elif empty_null is not None:
            per_numa[int(node)] = None if empty_null else []
    return out


def current_registered(conn: sqlite3.Connection) -> dict[str, list[str] | None]:
    """resource → registered device list (None where the checkpoint had null)."""
    out: dict[str, list[str] | None] = {}
    for resource, is_null, device_id in conn.execute(q.REGISTERED):
        if is_null:
            out[resource] = None
            continue
        lst = out.setdefault(resource, [])
        if device_id is not None and lst is not None:
            lst.append(device_id)
    return out


def record_deletes(conn: sqlite3.Connection, pod_uids: Iterable[str], pending: Pending) -> None:
    """Queue a 'delete' event for every entry of the given pods (before they are deleted)."""
    for uid in dict.fromkeys(pod_uids):
        for key, devices in current_entries(conn, uid).items():
            pending.entry("delete", key, devices)


def record_drops(conn: sqlite3.Connection, keep: set[Key], pending: Pending) -> None:
    """Queue a 'delete' event for every entry whose key is not in ``keep``."""
    for key, devices in current_entries(conn).items():
        if key not in keep:
            pending.entry("delete", key, devices)


def record_registered(
    conn: sqlite3.Connection,
    registered: Mapping[str, list[str] | None] | None,
    *,
    whole: bool,
    pending: Pending,
) -> None:
    """Queue events for the registered-device changes a write is about to make."""
    old = current_registered(conn)
    new: dict[str, list[str] | None] = {} if whole else dict(old)
    new.update(registered or {})
    for resource in sorted(old.keys() - new.keys()):
        pending.registered("unregistered", resource, old[resource])
    for resource, ids in new.items():
        if resource not in old or old[resource] != ids:
            pending.registered("registered", resource, ids)


# ---- reading events --------------------------------------------------------------------------

_EVENT_COLUMNS = "e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids"

_FILTERS = {
    "pod_uid": "e.pod_uid = :pod_uid",
    "device_id": (
        "e.seq IN (SELECT seq FROM allocation_event_devices WHERE device_id = :device_id)"
    ),
    "since": "e.ts >= :since",
    "until": "e.ts < :until",
}


def history_sql(filters: Iterable[str]) -> str:
    """The history query for the given filter names (fixed fragments, never user text)."""
    where = [_FILTERS[f] for f in filters]
    return (
        f"SELECT {_EVENT_COLUMNS} FROM allocation_events e"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY e.seq"
    )


def to_event(row: Sequence[Any]) -> AllocationEvent:
    seq, ts, op, pod, container, resource, text = row
    ids: DevicesPerNUMA | list[str] | None
    if pod is None:
        ids = None if text is None else list(json.loads(text))
    else:
        ids = _numa_from_json(text)
    return AllocationEvent(int(seq), parse_ts(ts), op, pod, container, resource, ids)


# The last event at or before an instant: seq and time order agree, so this is one probe of the
# ts index rather than a scan of everything before it.
_CUT_AT = """
    SELECT seq FROM allocation_events WHERE ts <= :when ORDER BY ts DESC, seq DESC LIMIT 1
"""
_CUT_BEFORE = """
    SELECT seq FROM allocation_events WHERE ts < :before ORDER BY ts DESC, seq DESC LIMIT 1
"""

# Entries that ever named the device up to the cut; for each, its latest event up to the cut
# decides: the entry held the device then if that event is not a delete and names it.
OWNERS_AT = f"""
    WITH cut (seq) AS ({_CUT_AT}),
    keys AS (
        SELECT DISTINCT e.pod_uid, e.container, e.resource
        FROM allocation_event_devices d
        JOIN allocation_events e ON e.seq = d.seq
        WHERE d.device_id = :device_id AND d.seq <= (SELECT seq FROM cut)
          AND e.pod_uid IS NOT NULL
    ),
    latest (seq) AS (
        SELECT (SELECT max(e.seq) FROM allocation_events e
                WHERE e.pod_uid = k.pod_uid AND e.container = k.container
                  AND e.resource = k.resource AND e.seq <= (SELECT seq FROM cut))
        FROM keys k
    )
    SELECT e.pod_uid, e.container, e.resource
    FROM latest l
    JOIN allocation_events e ON e.seq = l.seq
    WHERE e.op <> 'delete'
      AND EXISTS (SELECT 1 FROM allocation_event_devices d
                  WHERE d.seq = e.seq AND d.device_id = :device_id)
    ORDER BY e.pod_uid, e.container, e.resource
"""

# Retention: events before the cut go, except per key (entry, or registered resource) the
# latest one before the cut when it leaves the key live — it carries the state at the cut, so
# a replay of what remains still ends in the current state.
PRUNE = f"""
    WITH cut (seq) AS ({_CUT_BEFORE}),
    keep (seq) AS (
        SELECT max(e.seq) FROM allocation_events e
        WHERE e.seq <= (SELECT seq FROM cut)
        GROUP BY e.pod_uid, e.container, e.resource
    )
    DELETE FROM allocation_events
    WHERE seq <= (SELECT seq FROM cut)
      AND seq NOT IN (SELECT k.seq FROM keep k JOIN allocation_events e ON e.seq = k.seq
                      WHERE e.op NOT IN ('delete', 'unregistered'))
"""


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
