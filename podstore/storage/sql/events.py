"""The SQL of the allocation history: appending events, reading them, owners at an instant,
retention. (The history itself is described in ``storage/events.py``.)"""

from __future__ import annotations

from collections.abc import Iterable

# ---- appending -------------------------------------------------------------------------------

# The highest seq prune_history removed: no seq is handed out twice without AUTOINCREMENT.
_SEQ_FLOOR_KEY = "history_seq_floor"

_HIGH_WATER_EXPR = f"""
    max(coalesce((SELECT seq FROM allocation_events ORDER BY seq DESC LIMIT 1), 0),
        coalesce((SELECT CAST(value AS INTEGER) FROM store_meta
                  WHERE key = '{_SEQ_FLOOR_KEY}'), 0))
"""
#: The newest seq ever handed out; what shipping compares the fleet's ``last_seq`` with.
HIGH_WATER = f"SELECT {_HIGH_WATER_EXPR}"

# The newest kept event's seq, time and hash, and the floor, in two probes. When the floor is
# above its seq, prune_history removed the newest events: PRUNED_HEAD says where the chain is.
LAST = f"""
    SELECT seq, ts, hash,
           (SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = '{_SEQ_FLOOR_KEY}')
    FROM allocation_events ORDER BY seq DESC LIMIT 1
"""
SET_SEQ_FLOOR = f"""
    INSERT INTO store_meta (key, value) VALUES ('{_SEQ_FLOOR_KEY}', CAST(? AS TEXT))
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""
INSERT_EVENT = """
    INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids,
                                   released, hash)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# OR IGNORE: a device listed twice in one map is one row.
INSERT_EVENT_DEVICE = """
    INSERT OR IGNORE INTO event_device_rows (seq, device_id, released) VALUES (?, ?, ?)
"""

# ---- the hash chain (docs/sql.md, "The hash chain") --------------------------------------------

STORE_ID = "SELECT value FROM store_meta WHERE key = 'store_id'"
EVENT_HASH = "SELECT hash FROM allocation_events WHERE seq = ?"
LINK = "SELECT prev_hash FROM history_chain_links WHERE seq = ?"
# The high-water seq and the link prune_history left for the seq after it (NULL: none).
PRUNED_HEAD = f"""
    SELECT hw.seq, (SELECT prev_hash FROM history_chain_links WHERE seq = hw.seq + 1)
    FROM (SELECT {_HIGH_WATER_EXPR} AS seq) hw
"""
#: Every event with what its hash covers, in chain order, from ``seq`` on (verify, re-chain).
CHAIN_ROWS = """
    SELECT seq, ts, op, pod_uid, container, resource, device_ids, released, hash
    FROM allocation_events WHERE seq > ? ORDER BY seq LIMIT ?
"""
CHAIN_LINKS = "SELECT seq, prev_hash FROM history_chain_links ORDER BY seq"
LINK_COUNT = "SELECT count(*) FROM history_chain_links"
# reset_identity rewrites hashes, which the append-only trigger refuses: it drops the trigger
# and re-creates it from its stored text in the same transaction.
APPEND_ONLY_TRIGGER = """
    SELECT sql FROM sqlite_master
    WHERE type = 'trigger' AND name = 'tr_allocation_events_append_only'
"""
DROP_APPEND_ONLY_TRIGGER = "DROP TRIGGER tr_allocation_events_append_only"
SET_HASH = "UPDATE allocation_events SET hash = ? WHERE seq = ?"
SET_LINK = "UPDATE history_chain_links SET prev_hash = ? WHERE seq = ?"
SET_STORE_ID = """
    INSERT INTO store_meta (key, value) VALUES ('store_id', ?)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""

# ---- times: seq order is time order ------------------------------------------------------------
#
# ``ts`` has no index (one page less per insert), so a time becomes a seq by a binary search
# over numbers n (kept seqs have gaps): f(n), the ts of the first kept event at or after n, does
# not decrease; ~2·log2(n) one-row probes.


def _seq_from(param: str, *, strict: bool = False) -> str:
    """The smallest n with every kept event from n on at (``strict``: after) the time
    ``param`` or later, and every one below it earlier (a scalar subquery)."""
    compare = ">" if strict else ">="
    probe = f"""coalesce((SELECT x.ts {compare} {param} FROM allocation_events x
                  WHERE x.seq >= (b.lo + b.hi) / 2 ORDER BY x.seq LIMIT 1), 1)"""
    return f"""(WITH RECURSIVE b (lo, hi) AS (
        SELECT coalesce((SELECT min(seq) FROM allocation_events), 1),
               coalesce((SELECT max(seq) FROM allocation_events), 0) + 1
        UNION ALL
        SELECT CASE WHEN {probe} THEN b.lo ELSE (b.lo + b.hi) / 2 + 1 END,
               CASE WHEN {probe} THEN (b.lo + b.hi) / 2 ELSE b.hi END
        FROM b WHERE b.lo < b.hi
    ) SELECT max(lo) FROM b)"""


# ---- reading ---------------------------------------------------------------------------------

_EVENT_COLUMNS = "e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids, e.released"


def _device_pairs(param: str) -> str:
    """(seq, released) of every event naming the device ``param``; may name pruned events, so
    callers join the events."""
    return f"""
        SELECT since_seq AS seq, 0 AS released FROM allocation_device_spans
        WHERE device_id = {param}
        UNION ALL
        SELECT until_seq, until_released FROM allocation_device_spans
        WHERE device_id = {param} AND until_released IS NOT NULL
        UNION ALL
        SELECT seq, released FROM event_device_rows WHERE device_id = {param}
    """


# DRA events are keyed by claim ('dra:UID', no pod): one concerns a pod when it or the claim's
# event before it lists the pod (so dropping the pod, or deleting the claim, is the pod's too).
_DRA_EVENTS_OF_POD = """
    SELECT d.seq FROM allocation_events d
    WHERE d.pod_uid IS NULL AND d.container IS NULL
      AND d.resource >= 'dra:' AND d.resource < 'dra;'
      AND (
        EXISTS (SELECT 1 FROM json_each(d.device_ids, '$.pods') WHERE value = :pod_uid)
        OR EXISTS (
          SELECT 1 FROM json_each((
            SELECT p.device_ids FROM allocation_events p
            WHERE p.pod_uid IS NULL AND p.container IS NULL AND p.resource = d.resource
              AND p.seq < d.seq
            ORDER BY p.seq DESC LIMIT 1
          ), '$.pods') WHERE value = :pod_uid
        )
      )
"""

_FILTERS = {
    "pod_uid": f"(e.pod_uid = :pod_uid OR e.seq IN ({_DRA_EVENTS_OF_POD}))",
    "device_id": f"e.seq IN (SELECT seq FROM ({_device_pairs(':device_id')}))",
    "since": f"e.seq >= {_seq_from(':since')}",
    "until": f"e.seq < {_seq_from(':until')}",
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

# The last event at or before an instant, and the last one before it.
_CUT_AT = f"""
    SELECT max(seq) FROM allocation_events WHERE seq < {_seq_from(":when", strict=True)}
"""
_CUT_BEFORE = f"""
    SELECT max(seq) FROM allocation_events WHERE seq < {_seq_from(":before")}
"""

# Per entry that ever named the device up to the cut, its latest event there decides: held if
# not a delete and listing it with released = 0.
OWNERS_AT = f"""
    WITH cut (seq) AS ({_CUT_AT}),
    pairs (seq, released) AS ({_device_pairs(":device_id")}),
    keys AS (
        SELECT DISTINCT e.pod_uid, e.container, e.resource
        FROM pairs d
        JOIN allocation_events e ON e.seq = d.seq
        WHERE d.seq <= (SELECT seq FROM cut) AND e.pod_uid IS NOT NULL
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
      AND EXISTS (SELECT 1 FROM pairs d WHERE d.seq = e.seq AND d.released = 0)
    ORDER BY e.pod_uid, e.container, e.resource
"""

# Retention: events before the cut go, except per key the latest one when it leaves the key
# live (a replay of what remains still ends in the current state). The doomed seqs are marked
# first so that the links are written from their hashes before they go.

#: The TEMP table of the seqs one prune_history removes (emptied before and after).
SETUP = ("CREATE TEMP TABLE IF NOT EXISTS prune_doomed (seq INTEGER PRIMARY KEY)",)
PRUNE_CLEAR = "DELETE FROM temp.prune_doomed"
PRUNE_COUNT = "SELECT count(*) FROM temp.prune_doomed"
PRUNE = f"""
    INSERT INTO temp.prune_doomed (seq)
    WITH cut (seq) AS ({_CUT_BEFORE}),
    keep (seq) AS (
        SELECT max(e.seq) FROM allocation_events e
        WHERE e.seq <= (SELECT seq FROM cut) AND e.op <> 'end'
        GROUP BY e.pod_uid, e.container, e.resource
    ),
    kept (seq, pod_uid, container, resource) AS (
        SELECT e.seq, e.pod_uid, e.container, e.resource
        FROM keep k JOIN allocation_events e ON e.seq = k.seq
        WHERE e.op NOT IN ('delete', 'unregistered') AND e.op NOT LIKE '%-delete'
    )
    SELECT seq FROM allocation_events x
    WHERE seq <= (SELECT seq FROM cut)
      AND seq NOT IN (SELECT seq FROM kept)
      -- An end after the kept state of its holder (its entry, or its DRA claim) still ends
      -- the holding that state begins: it stays with it.
      AND NOT (x.op = 'end' AND EXISTS (
          SELECT 1 FROM kept k
          WHERE k.resource = x.resource AND k.seq < x.seq
            AND ((k.pod_uid = x.pod_uid AND k.container IS x.container)
                 OR (k.pod_uid IS NULL AND k.container IS NULL AND x.resource LIKE 'dra:%'))))
"""
# A link for each kept event whose predecessor goes, and for the seq after the high water.
PRUNE_LINKS = """
    INSERT INTO history_chain_links (seq, prev_hash)
    SELECT e.seq + 1, e.hash
    FROM temp.prune_doomed d JOIN allocation_events e ON e.seq = d.seq
    WHERE NOT EXISTS (SELECT 1 FROM temp.prune_doomed x WHERE x.seq = d.seq + 1)
      AND (d.seq = :high_water
           OR EXISTS (SELECT 1 FROM allocation_events k WHERE k.seq = d.seq + 1))
"""
# Links of events that go are of no use any more (their successors got links of their own).
PRUNE_UNLINK = """
    DELETE FROM history_chain_links WHERE seq IN (SELECT seq FROM temp.prune_doomed)
"""
PRUNE_DELETE = """
    DELETE FROM allocation_events WHERE seq IN (SELECT seq FROM temp.prune_doomed)
"""
# Closed spans naming no kept event at either end (one pass over the spans; prune is rare).
PRUNE_SPANS = """
    DELETE FROM allocation_device_spans
    WHERE until_seq IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = since_seq)
      AND NOT EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = until_seq)
"""
