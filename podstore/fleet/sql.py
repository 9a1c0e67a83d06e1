"""Every SQL statement over the central tables (the views are in ``views.py``).

Statements take named parameters (``:store_id``, ...) and run through SQLAlchemy's ``text()``
on psycopg; a batch of node rows travels as one JSON array of objects (``:rows``) unpacked by
``json_to_recordset``: one statement per table whatever the batch size, and one text value to
send (psycopg's per-element escaping of text arrays cost more than the inserts). Casts are
written ``CAST(x AS t)``: ``text()`` would read ``:x::t`` as a parameter named ``x::t``.
"""

from __future__ import annotations

# ---- schema bookkeeping -------------------------------------------------------------------------

#: Alembic's version table of the central schema (apart from the node store's).
VERSION_TABLE = "fleet_alembic_version"

ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(:id)"
VERSION_TABLE_EXISTS = f"SELECT to_regclass('{VERSION_TABLE}') IS NOT NULL"
REVISION = f"SELECT version_num FROM {VERSION_TABLE}"

# ---- shipping: the store's row, the lock every batch takes ------------------------------------

# Shippers of one store queue here: the upsert takes the row's lock and returns the newest
# last_seq (ON CONFLICT DO UPDATE works on the latest committed version), and each batch runs
# under that lock from reading last_seq to writing the new one, so two shippers never send the
# same events. (APPLY_BATCH's ON CONFLICT DO NOTHING therefore never fires; the lock, not it,
# keeps each event single.)
LOCK_STORE = """
    INSERT INTO fleet_stores (store_id, node) VALUES (:store_id, :node)
    ON CONFLICT (store_id) DO UPDATE SET node = EXCLUDED.node
    RETURNING last_seq
"""
MARK_SHIPPED = """
    UPDATE fleet_stores SET last_seq = :last_seq, last_shipped_at = now()
    WHERE store_id = :store_id
"""

# ---- shipping: one batch, in one statement --------------------------------------------------
#
# The batch's events go in with the devices they name, and the current state moves past them:
# each entry (and registered resource) takes the state of its last event in the batch, found in
# Python in one pass (``:entries``, ``:registered``, ``:gone``), which also unpacks the device
# rows of the entries written from their NUMA maps (``:allocations``). Every part is a
# data-modifying CTE of a single statement, so a batch costs one round trip. They all see the
# state from before the statement, so two parts never touch the same row: device rows carry the
# seq of the event that wrote them (the old version's rows are deleted, the new version's
# inserted under another key), entries are upserted or deleted by disjoint keys.


_ALLOCATION_COLUMNS = "store_id, pod_uid, container, resource, seq, numa_node, position, device_id"
_ENTRY_COLUMNS = "store_id, pod_uid, container, resource, device_ids, seq"

APPLY_BATCH = f"""
    WITH inserted AS (
        INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource,
                                  device_ids, devices)
        SELECT :store_id, u.seq, u.ts, u.op, u.pod_uid, u.container, u.resource,
               CAST(u.device_ids AS jsonb), u.devices
        FROM json_to_recordset(CAST(:events AS json))
             AS u (seq bigint, ts timestamptz, op text, pod_uid text, container text,
                   resource text, device_ids text, devices text[])
        ON CONFLICT (store_id, seq) DO NOTHING
        RETURNING seq
    ),
    touched AS (
        SELECT * FROM json_to_recordset(CAST(:entries AS json))
             AS t (pod_uid text, container text, resource text, device_ids text, seq bigint)
    ),
    released AS (
        DELETE FROM fleet_allocations a USING touched t
        WHERE a.store_id = :store_id AND a.pod_uid = t.pod_uid
          AND a.container = t.container AND a.resource = t.resource
    ),
    removed AS (
        DELETE FROM fleet_entries e USING touched t
        WHERE e.store_id = :store_id AND e.pod_uid = t.pod_uid
          AND e.container = t.container AND e.resource = t.resource AND t.seq IS NULL
    ),
    written AS (
        INSERT INTO fleet_entries ({_ENTRY_COLUMNS})
        SELECT :store_id, pod_uid, container, resource, CAST(device_ids AS jsonb), seq
        FROM touched WHERE seq IS NOT NULL
        ON CONFLICT (store_id, pod_uid, container, resource)
        DO UPDATE SET device_ids = EXCLUDED.device_ids, seq = EXCLUDED.seq
    ),
    held AS (
        INSERT INTO fleet_allocations ({_ALLOCATION_COLUMNS})
        SELECT :store_id, u.pod_uid, u.container, u.resource, u.seq, u.numa_node, u.position,
               u.device_id
        FROM json_to_recordset(CAST(:allocations AS json))
             AS u (pod_uid text, container text, resource text, seq bigint, numa_node bigint,
                   position integer, device_id text)
        RETURNING resource, device_id, pod_uid
    ),
    -- Double allocations: recount the devices the batch gave to an entry and those listed
    -- already (a device only becomes one by being given, only stops by being listed). Their
    -- holders are the new rows and the old rows of entries the batch did not touch.
    affected AS (
        SELECT resource, device_id FROM held
        UNION
        SELECT resource, device_id FROM fleet_double_allocated WHERE store_id = :store_id
    ),
    holders AS (
        SELECT resource, device_id, pod_uid FROM held
        UNION
        SELECT a.resource, a.device_id, a.pod_uid
        FROM affected f
        JOIN fleet_allocations a
          ON a.store_id = :store_id AND a.resource = f.resource AND a.device_id = f.device_id
        WHERE NOT EXISTS (SELECT 1 FROM touched t
                          WHERE t.pod_uid = a.pod_uid AND t.container = a.container
                            AND t.resource = a.resource)
    ),
    counted AS (
        SELECT resource, device_id, count(*) AS pod_count FROM holders
        GROUP BY resource, device_id
    ),
    undoubled AS (
        DELETE FROM fleet_double_allocated d USING affected f
        WHERE d.store_id = :store_id AND d.resource = f.resource AND d.device_id = f.device_id
          AND NOT EXISTS (SELECT 1 FROM counted c
                          WHERE c.resource = d.resource AND c.device_id = d.device_id
                            AND c.pod_count > 1)
    ),
    doubled AS (
        INSERT INTO fleet_double_allocated (store_id, resource, device_id, pod_count)
        SELECT :store_id, resource, device_id, pod_count FROM counted WHERE pod_count > 1
        ON CONFLICT (store_id, resource, device_id) DO UPDATE SET pod_count = EXCLUDED.pod_count
    ),
    unregistered AS (
        DELETE FROM fleet_registered
        WHERE store_id = :store_id
          AND resource IN (SELECT value FROM json_array_elements_text(CAST(:gone AS json)))
    ),
    registered AS (
        INSERT INTO fleet_registered (store_id, resource, device_ids)
        SELECT :store_id, u.resource, CAST(u.device_ids AS jsonb)
        FROM json_to_recordset(CAST(:registered AS json)) AS u (resource text, device_ids text)
        ON CONFLICT (store_id, resource) DO UPDATE SET device_ids = EXCLUDED.device_ids
    ),
    marked AS (
        UPDATE fleet_stores SET last_seq = :last_seq, last_shipped_at = now()
        WHERE store_id = :store_id
    )
    SELECT count(*) FROM inserted
"""

# ---- shipping: a snapshot in place of pruned history -------------------------------------
#
# The store's state is cleared, then APPLY_BATCH writes the snapshot's entries (all at its seq)
# and registered devices, with the events the node kept in the gap as history only.

CLEAR_STATE = (
    "DELETE FROM fleet_double_allocated WHERE store_id = :store_id",
    "DELETE FROM fleet_allocations WHERE store_id = :store_id",
    "DELETE FROM fleet_entries WHERE store_id = :store_id",
    "DELETE FROM fleet_registered WHERE store_id = :store_id",
)
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

# ---- reading -------------------------------------------------------------------------------

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
        SELECT e.store_id, e.pod_uid, e.container, e.resource
        FROM fleet_events e
        JOIN stores s ON s.store_id = e.store_id
        LEFT JOIN base b ON b.store_id = e.store_id
        WHERE e.devices @> ARRAY[CAST(:device_id AS text)] AND e.pod_uid IS NOT NULL
          AND e.ts <= CAST(:at AS timestamptz) AND e.seq > coalesce(b.at_seq, 0)
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
       OR (e.op <> 'delete' AND e.devices @> ARRAY[CAST(:device_id AS text)])
    ORDER BY s.node, d.store_id, d.pod_uid, d.container, d.resource
"""

# `fleet sql`: the transaction may only read, and a statement may run this long.
READ_ONLY = "SET TRANSACTION READ ONLY"
STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', :ms, true)"
