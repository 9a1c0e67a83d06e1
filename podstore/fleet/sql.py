"""Every SQL statement over the central tables (the views are in ``views.py``).

Statements take named parameters (``:store_id``, ...) and run through SQLAlchemy's ``text()``
on psycopg; a batch of node rows travels as one array per column and is unpacked with
``unnest`` (one statement per table, whatever the batch size). Casts are written
``CAST(x AS t)``: ``text()`` would read ``:x::t`` as a parameter named ``x::t``.
"""

from __future__ import annotations

# ---- schema bookkeeping -------------------------------------------------------------------------

#: Alembic's version table of the central schema (apart from the node store's).
VERSION_TABLE = "fleet_alembic_version"

ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(:id)"
VERSION_TABLE_EXISTS = f"SELECT to_regclass('{VERSION_TABLE}') IS NOT NULL"
REVISION = f"SELECT version_num FROM {VERSION_TABLE}"

# ---- shipping: the store's row, the lock every batch takes ------------------------------------

ENSURE_STORE = """
    INSERT INTO fleet_stores (store_id, node) VALUES (:store_id, :node)
    ON CONFLICT (store_id) DO NOTHING
"""
# Shippers of one store queue here: each batch runs under this row lock, from reading
# last_seq to writing the new one, so two shippers never send the same events.
LOCK_STORE = "SELECT last_seq FROM fleet_stores WHERE store_id = :store_id FOR UPDATE"
MARK_SHIPPED = """
    UPDATE fleet_stores SET last_seq = :last_seq, node = :node, last_shipped_at = now()
    WHERE store_id = :store_id
"""

# ---- shipping: events -------------------------------------------------------------------------

INSERT_EVENTS = """
    INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource, device_ids)
    SELECT :store_id, u.seq, u.ts, u.op, u.pod_uid, u.container, u.resource,
           CAST(u.device_ids AS jsonb)
    FROM unnest(CAST(:seq AS bigint[]), CAST(:ts AS timestamptz[]), CAST(:op AS text[]),
                CAST(:pod_uid AS text[]), CAST(:container AS text[]),
                CAST(:resource AS text[]), CAST(:device_ids AS text[]))
         AS u (seq, ts, op, pod_uid, container, resource, device_ids)
    ON CONFLICT (store_id, seq) DO NOTHING
"""
INSERT_EVENT_DEVICES = """
    INSERT INTO fleet_event_devices (store_id, seq, device_id)
    SELECT :store_id, u.seq, u.device_id
    FROM unnest(CAST(:seq AS bigint[]), CAST(:device_id AS text[])) AS u (seq, device_id)
    ON CONFLICT (store_id, seq, device_id) DO NOTHING
"""

# ---- shipping: applying a batch (lo, hi] of events to the current state ------------------------
#
# An entry's state after the batch is its last event in it: the touched entries are removed
# and those whose last event is not a delete written again, with their device rows.

_BATCH = "store_id = :store_id AND seq > :lo AND seq <= :hi"

DELETE_TOUCHED_ALLOCATIONS = f"""
    DELETE FROM fleet_allocations a
    USING (SELECT DISTINCT pod_uid, container, resource FROM fleet_events
           WHERE {_BATCH} AND pod_uid IS NOT NULL) k
    WHERE a.store_id = :store_id AND a.pod_uid = k.pod_uid AND a.container = k.container
      AND a.resource = k.resource
"""
DELETE_TOUCHED_ENTRIES = f"""
    DELETE FROM fleet_entries e
    USING (SELECT DISTINCT pod_uid, container, resource FROM fleet_events
           WHERE {_BATCH} AND pod_uid IS NOT NULL) k
    WHERE e.store_id = :store_id AND e.pod_uid = k.pod_uid AND e.container = k.container
      AND e.resource = k.resource
"""


def _explode(source: str) -> str:
    """Device rows (numa_node, position, device_id) of the entries in ``source`` (a relation
    with store_id, pod_uid, container, resource, device_ids): a null map or list has none."""
    return f"""
    SELECT x.store_id, x.pod_uid, x.container, x.resource, CAST(n.key AS bigint),
           CAST(d.ord AS integer) - 1, d.value
    FROM {source} x
    CROSS JOIN LATERAL jsonb_each(
        CASE WHEN jsonb_typeof(x.device_ids) = 'object' THEN x.device_ids
             ELSE CAST('{{}}' AS jsonb) END) AS n (key, value)
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(n.value) = 'array' THEN n.value
             ELSE CAST('[]' AS jsonb) END) WITH ORDINALITY AS d (value, ord)"""


_ALLOCATION_COLUMNS = "store_id, pod_uid, container, resource, numa_node, position, device_id"
_ENTRY_COLUMNS = "store_id, pod_uid, container, resource, device_ids, seq"

INSERT_LAST_ENTRIES = f"""
    WITH last AS (
        SELECT DISTINCT ON (pod_uid, container, resource)
               store_id, pod_uid, container, resource, op, device_ids, seq
        FROM fleet_events
        WHERE {_BATCH} AND pod_uid IS NOT NULL
        ORDER BY pod_uid, container, resource, seq DESC
    ),
    written AS (
        INSERT INTO fleet_entries ({_ENTRY_COLUMNS})
        SELECT store_id, pod_uid, container, resource, device_ids, seq FROM last
        WHERE op <> 'delete'
        RETURNING {_ENTRY_COLUMNS}
    )
    INSERT INTO fleet_allocations ({_ALLOCATION_COLUMNS}) {_explode("written")}
"""

_LAST_REGISTERED = f"""
    WITH last AS (
        SELECT DISTINCT ON (resource) resource, op, device_ids
        FROM fleet_events
        WHERE {_BATCH} AND pod_uid IS NULL
        ORDER BY resource, seq DESC
    )"""
UPSERT_REGISTERED = f"""{_LAST_REGISTERED}
    INSERT INTO fleet_registered (store_id, resource, device_ids)
    SELECT :store_id, resource, device_ids FROM last WHERE op <> 'unregistered'
    ON CONFLICT (store_id, resource) DO UPDATE SET device_ids = EXCLUDED.device_ids
"""
DELETE_UNREGISTERED = f"""{_LAST_REGISTERED}
    DELETE FROM fleet_registered r USING last l
    WHERE r.store_id = :store_id AND r.resource = l.resource AND l.op = 'unregistered'
"""

# ---- shipping: a snapshot in place of pruned history ----------------------------------------------

CLEAR_STATE = (
    "DELETE FROM fleet_allocations WHERE store_id = :store_id",
    "DELETE FROM fleet_entries WHERE store_id = :store_id",
    "DELETE FROM fleet_registered WHERE store_id = :store_id",
)
INSERT_SNAPSHOT_ENTRIES = f"""
    WITH written AS (
        INSERT INTO fleet_entries ({_ENTRY_COLUMNS})
        SELECT :store_id, u.pod_uid, u.container, u.resource, CAST(u.device_ids AS jsonb),
               :at_seq
        FROM unnest(CAST(:pod_uid AS text[]), CAST(:container AS text[]),
                    CAST(:resource AS text[]), CAST(:device_ids AS text[]))
             AS u (pod_uid, container, resource, device_ids)
        RETURNING {_ENTRY_COLUMNS}
    )
    INSERT INTO fleet_allocations ({_ALLOCATION_COLUMNS}) {_explode("written")}
"""
INSERT_SNAPSHOT_REGISTERED = """
    INSERT INTO fleet_registered (store_id, resource, device_ids)
    SELECT :store_id, u.resource, CAST(u.device_ids AS jsonb)
    FROM unnest(CAST(:resource AS text[]), CAST(:device_ids AS text[])) AS u (resource, device_ids)
"""
INSERT_SNAPSHOT = """
    INSERT INTO fleet_snapshots (store_id, at_seq, after_seq, missing_events, entries,
                                 registered, ts)
    VALUES (:store_id, :at_seq, :after_seq, :missing_events, :entries, :registered,
            CAST(:ts AS timestamptz))
"""
INSERT_SNAPSHOT_DEVICES = """
    INSERT INTO fleet_snapshot_devices (store_id, at_seq, pod_uid, container, resource,
                                        device_id)
    SELECT DISTINCT store_id, :at_seq, pod_uid, container, resource, device_id
    FROM fleet_allocations WHERE store_id = :store_id
"""

# ---- reading --------------------------------------------------------------------------------------

NODES = """
    SELECT s.node, s.store_id, s.last_seq, s.last_shipped_at,
           (SELECT count(*) FROM fleet_events e WHERE e.store_id = s.store_id) AS events,
           (SELECT count(*) FROM fleet_entries e WHERE e.store_id = s.store_id) AS entries,
           (SELECT count(*) FROM fleet_allocations a WHERE a.store_id = s.store_id)
               AS device_rows,
           (SELECT count(*) FROM fleet_snapshots p WHERE p.store_id = s.store_id) AS snapshots
    FROM fleet_stores s
    ORDER BY s.node, s.store_id
"""

OWNERS_NOW = """
    SELECT s.node, a.store_id, a.pod_uid, a.container, a.resource
    FROM (SELECT DISTINCT store_id, pod_uid, container, resource FROM fleet_allocations
          WHERE device_id = :device_id) a
    JOIN fleet_stores s ON s.store_id = a.store_id
    WHERE CAST(:node AS text) IS NULL OR s.node = :node
    ORDER BY s.node, a.store_id, a.pod_uid, a.container, a.resource
"""

# Who held a device at an instant, per store, from the shipped history (the node's OWNERS_AT
# rule): each entry that named the device up to the instant is decided by its latest event
# up to then. Where a snapshot stood in for pruned history, history starts again from the
# latest snapshot at or before the instant: its entries are the baseline, and only events
# after it count.
OWNERS_AT = """
    WITH stores AS (
        SELECT store_id, node FROM fleet_stores
        WHERE CAST(:node AS text) IS NULL OR node = :node
    ),
    base AS (
        SELECT DISTINCT ON (p.store_id) p.store_id, p.at_seq
        FROM fleet_snapshots p JOIN stores s ON s.store_id = p.store_id
        WHERE p.ts <= CAST(:at AS timestamptz)
        ORDER BY p.store_id, p.at_seq DESC
    ),
    candidates AS (
        SELECT d.store_id, e.pod_uid, e.container, e.resource
        FROM fleet_event_devices d
        JOIN stores s ON s.store_id = d.store_id
        JOIN fleet_events e ON e.store_id = d.store_id AND e.seq = d.seq
        LEFT JOIN base b ON b.store_id = d.store_id
        WHERE d.device_id = :device_id AND e.pod_uid IS NOT NULL
          AND e.ts <= CAST(:at AS timestamptz) AND d.seq > coalesce(b.at_seq, 0)
        UNION
        SELECT p.store_id, p.pod_uid, p.container, p.resource
        FROM fleet_snapshot_devices p
        JOIN base b ON b.store_id = p.store_id AND b.at_seq = p.at_seq
        WHERE p.device_id = :device_id
    ),
    decided AS (
        SELECT c.store_id, c.pod_uid, c.container, c.resource,
               (SELECT max(e.seq) FROM fleet_events e
                WHERE e.store_id = c.store_id AND e.pod_uid = c.pod_uid
                  AND e.container = c.container AND e.resource = c.resource
                  AND e.ts <= CAST(:at AS timestamptz)
                  AND e.seq > coalesce((SELECT b.at_seq FROM base b
                                        WHERE b.store_id = c.store_id), 0)) AS seq
        FROM candidates c
    )
    SELECT s.node, d.store_id, d.pod_uid, d.container, d.resource
    FROM decided d
    JOIN stores s ON s.store_id = d.store_id
    LEFT JOIN fleet_events e ON e.store_id = d.store_id AND e.seq = d.seq
    WHERE d.seq IS NULL
       OR (e.op <> 'delete'
           AND EXISTS (SELECT 1 FROM fleet_event_devices x
                       WHERE x.store_id = e.store_id AND x.seq = e.seq
                         AND x.device_id = :device_id))
    ORDER BY s.node, d.store_id, d.pod_uid, d.container, d.resource
"""

# `fleet sql`: the transaction may only read, and a statement may run this long.
READ_ONLY = "SET TRANSACTION READ ONLY"
STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', :ms, true)"
