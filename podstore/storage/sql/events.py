"""The SQL of the allocation history: appending events, reading them, owners at an instant,
retention. (The history itself is described in ``storage/events.py``.)"""

from __future__ import annotations

from collections.abc import Iterable

# ---- appending -------------------------------------------------------------------------------

# store_meta key: the highest seq prune_history removed (revision 0004), so that a number is
# never handed out twice although allocation_events has no AUTOINCREMENT.
_SEQ_FLOOR_KEY = "history_seq_floor"

# The newest seq ever handed out (0 before the first event), pruned or not: the newest kept
# event or the floor prune_history left, whichever is higher.
_HIGH_WATER_EXPR = f"""
    max(coalesce((SELECT seq FROM allocation_events ORDER BY seq DESC LIMIT 1), 0),
        coalesce((SELECT CAST(value AS INTEGER) FROM store_meta
                  WHERE key = '{_SEQ_FLOOR_KEY}'), 0))
"""
#: The newest seq ever handed out; what shipping compares the fleet's ``last_seq`` with.
HIGH_WATER = f"SELECT {_HIGH_WATER_EXPR}"

# The last seq handed out and the last event's time: two probes of the rowid B-tree's end and
# one of store_meta, nothing written.
LAST = f"""
    SELECT {_HIGH_WATER_EXPR},
           (SELECT ts FROM allocation_events ORDER BY seq DESC LIMIT 1)
"""
SET_SEQ_FLOOR = f"""
    INSERT INTO store_meta (key, value) VALUES ('{_SEQ_FLOOR_KEY}', CAST(? AS TEXT))
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""
INSERT_EVENT = """
    INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""
INSERT_EVENT_DEVICE = """
    INSERT OR IGNORE INTO allocation_event_devices (seq, device_id) VALUES (?, ?)
"""


# ---- reading ---------------------------------------------------------------------------------

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


#: The filter names :func:`history_sql` accepts.
HISTORY_FILTERS = frozenset(_FILTERS)

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
