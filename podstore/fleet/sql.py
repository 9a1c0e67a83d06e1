"""Every SQL statement over the central tables (the views are in ``views.py``), with named
parameters for SQLAlchemy's ``text()``: casts are ``CAST(x AS t)``, since ``text()`` reads
``:x::t`` as a parameter named ``x::t``. Rows travel as one JSON text (``json_to_recordset``):
psycopg's per-element escaping of text arrays cost more than the inserts.
"""

from __future__ import annotations

# ---- schema bookkeeping -------------------------------------------------------------------------

#: Alembic's version table of the central schema (apart from the node store's).
VERSION_TABLE = "fleet_alembic_version"

ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(:id)"
LOCK_VERSION_TABLE = f"LOCK TABLE {VERSION_TABLE} IN EXCLUSIVE MODE"
#: The other sessions holding a lock on a relation of the fleet's schema, or an advisory lock
#: in its database, and their roles.
LOCK_HOLDERS = """
    SELECT DISTINCT l.pid, a.usename
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN pg_class c ON c.oid = l.relation
    WHERE l.granted AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.locktype = 'advisory'
           OR (l.locktype = 'relation'
               AND c.relnamespace = CAST(current_schema() AS regnamespace)))
    ORDER BY l.pid
"""
#: Read from pg_class, not by to_regclass: a session keeps a failed name lookup cached until
#: it processes invalidations, which waiting for an advisory lock does not, so a run that
#: waited for another's ``fleet init`` would still find no table (and report "created").
VERSION_TABLE_EXISTS = f"""
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relname = '{VERSION_TABLE}' AND n.nspname = current_schema()
    )
"""
REVISION = f"SELECT version_num FROM {VERSION_TABLE}"

# ---- shipping: the functions of revisions f0002 and f0003 ----------------------------------
#
# The SECURITY DEFINER functions of f0002_trust.py, the only writes a node role may make: each
# locks the store's row, checks the caller, the node, retirement and the chain, and returns a
# refusal as text (counted on the store; the caller commits the count, nothing else written).

#: The store's newest seq and chain head held here, locked for this transaction, and why this
#: node may not ship it (NULL: it may).
SHIP_OPEN = """
    SELECT last_seq, head_hash, refused
    FROM fleet_ship_open(CAST(:store_id AS uuid), CAST(:node AS text))
"""
#: Events after last_seq (``fleet_events_in``: a JSON array of arrays, and the hashes apart),
#: with the node's chain value at last_seq and its newest seq: how many were inserted, or the
#: refusal.
SHIP_BATCH = """
    SELECT shipped, refused
    FROM fleet_ship_batch(CAST(:store_id AS uuid), CAST(:node AS text),
                          CAST(:node_high AS bigint), CAST(:prev AS bytea),
                          CAST(:events AS jsonb), CAST(:hashes AS bytea))
"""
#: A gap healed: the node's current state at its newest seq replaces the central state.
SHIP_SNAPSHOT = """
    SELECT shipped, missing, refused
    FROM fleet_ship_snapshot(CAST(:store_id AS uuid), CAST(:node AS text),
                             CAST(:at_seq AS bigint), CAST(:ts AS timestamptz),
                             CAST(:head AS bytea), CAST(:entries AS json),
                             CAST(:registered AS json), CAST(:kept AS jsonb),
                             CAST(:kept_hashes AS bytea), CAST(:links AS json),
                             CAST(:node_items AS json))
"""

#: The node's physical-device facts now (f0008): the store's rows replaced by these when they
#: differ; how many of the two sets were rewritten, or the refusal.
SHIP_PHYSICAL = """
    SELECT changed, refused
    FROM fleet_ship_physical(CAST(:store_id AS uuid), CAST(:node AS text),
                             CAST(:cdi AS json), CAST(:responses AS json))
"""

# ---- reading -------------------------------------------------------------------------------

# The counters are kept by the shipping functions: no history is counted per call.
NODES = """
    SELECT node, store_id, last_seq, last_shipped_at, events, entries, device_rows, snapshots,
           refusals, last_refusal, retired_at
    FROM fleet_stores
    ORDER BY node, store_id
"""

# The pod's name, from the store's pod-name item (revision f0003), for the rows of `owners`.
_NAME_JOIN = """
    LEFT JOIN fleet_node_items n
      ON n.store_id = h.store_id
     AND n.item_key = CAST(jsonb_build_array(h.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
"""
_OWNERS_SELECT = """
    SELECT s.node, h.store_id, h.pod_uid, h.container, h.resource,
           n.value ->> 'namespace' AS namespace, n.value ->> 'name' AS pod_name, h.claim
"""
# A DRA device (driver/pool/device, as the node's `owners` takes it): one row per pod of each
# claim using it (pod_uid NULL: a claim no pod lists), container NULL, resource the driver, and
# the claim as namespace/name.
_DRA_HOLDERS = """
        SELECT c.store_id, p.pod_uid, CAST(NULL AS text) AS container,
               split_part(CAST(:device_id AS text), '/', 1) AS resource,
               (c.value ->> 'namespace') || '/' || (c.value ->> 'name') AS claim
        FROM {claims} c
        LEFT JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(c.value -> 'pods') = 'array' THEN c.value -> 'pods' END)
            AS p (pod_uid) ON true
"""

OWNERS_NOW = f"""
    WITH held AS (
        SELECT DISTINCT a.store_id, a.pod_uid, a.container, a.resource,
               CAST(NULL AS text) AS claim
        FROM fleet_allocations a WHERE a.device_id = :device_id
        UNION ALL
        {
    _DRA_HOLDERS.format(
        claims="(SELECT i.store_id, i.value FROM fleet_node_items i "
        "WHERE i.devices @> ARRAY[CAST(:device_id AS text)])"
    )
}
    )
    {_OWNERS_SELECT}
    FROM held h
    JOIN fleet_stores s ON s.store_id = h.store_id
    {_NAME_JOIN}
    WHERE (CAST(:node AS text) IS NULL OR s.node = :node) AND s.retired_at IS NULL
    ORDER BY s.node, h.store_id, h.pod_uid, h.container, h.resource, h.claim
"""

# Who held a device at an instant (the node's OWNERS_AT and DRA_CLAIMS_AT rules): each entry or
# claim that named it is decided by its latest event up to then; history starts again from the
# latest snapshot at or before the instant. Snapshots hold no claims, so every held DRA event
# counts (a claim released in pruned history shows until its next event).
OWNERS_AT = f"""
    WITH stores AS (
        SELECT store_id, node FROM fleet_stores
        WHERE (CAST(:node AS text) IS NULL OR node = :node)
          AND (retired_at IS NULL OR retired_at > CAST(:at AS timestamptz))
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
    ),
    claims AS (
        SELECT DISTINCT e.store_id, e.resource
        FROM fleet_events e
        JOIN stores s ON s.store_id = e.store_id
        WHERE e.devices @> ARRAY[CAST(:device_id AS text)] AND e.op IN ('dra-set', 'dra-delete')
          AND e.ts <= CAST(:at AS timestamptz)
    ),
    claims_then AS (
        SELECT e.store_id, e.device_ids AS value
        FROM claims c
        JOIN fleet_events e
          ON e.store_id = c.store_id
         AND e.seq = (SELECT max(l.seq) FROM fleet_events l
                      WHERE l.store_id = c.store_id AND l.pod_uid IS NULL
                        AND l.container IS NULL AND l.resource = c.resource
                        AND l.ts <= CAST(:at AS timestamptz))
        WHERE e.op = 'dra-set' AND e.devices @> ARRAY[CAST(:device_id AS text)]
    ),
    held AS (
        SELECT d.store_id, d.pod_uid, d.container, d.resource, CAST(NULL AS text) AS claim
        FROM decided d
        LEFT JOIN fleet_events e ON e.store_id = d.store_id AND e.seq = d.seq
        WHERE d.seq IS NULL
           OR (e.op <> 'delete' AND e.devices @> ARRAY[CAST(:device_id AS text)])
        UNION ALL
        {_DRA_HOLDERS.format(claims="claims_then")}
    )
    {_OWNERS_SELECT}
    FROM held h
    JOIN stores s ON s.store_id = h.store_id
    {_NAME_JOIN}
    ORDER BY s.node, h.store_id, h.pod_uid, h.container, h.resource, h.claim
"""

# `fleet sql`: the transaction may only read, and a statement may run this long (SET, not
# set_config(): `fleet grant-reader` revokes set_config from PUBLIC).
READ_ONLY = "SET TRANSACTION READ ONLY"
STATEMENT_TIMEOUT = "SET LOCAL statement_timeout = {ms:d}"

# The predefined roles whose members reach the server's files, programs, other sessions or
# server state (another session's query text can hold a password; pg_monitor holds the
# pg_read_all_* roles). Named, not resolved: roles a PostgreSQL version lacks are skipped.
SERVER_ROLES = (
    "pg_execute_server_program",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_signal_backend",
    "pg_read_all_stats",
    "pg_read_all_settings",
    "pg_stat_scan_tables",
    "pg_monitor",
    "pg_read_all_data",
    "pg_write_all_data",
    "pg_checkpoint",
    # PostgreSQL 17: VACUUM, LOCK TABLE, REINDEX … on every relation.
    "pg_maintain",
)


def _privileged(role: str) -> str:
    names = ", ".join(f"'{r}'" for r in SERVER_ROLES)
    return (
        f"(SELECT rolsuper FROM pg_roles WHERE oid = {role}) OR EXISTS (SELECT FROM pg_roles p "
        f"WHERE p.rolname IN ({names}) AND pg_has_role({role}, p.oid, 'MEMBER'))"
    )


#: Before `fleet sql` drops to the reader role: whether the session's role is privileged; the
#: reader's existence, privilege and set_config() right (to switch back with); the session's
#: role and superuser flag; the reader's temp_file_limit (SET ROLE does not bring it).
READER_CHECK = f"""
    SELECT {_privileged("(SELECT oid FROM pg_roles WHERE rolname = session_user)")},
           r.oid IS NOT NULL,
           CASE WHEN r.oid IS NOT NULL THEN {_privileged("r.oid")} END,
           CASE WHEN r.oid IS NOT NULL THEN has_function_privilege(
               r.oid, 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE') END,
           session_user,
           (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
           (SELECT o.option_value
            FROM pg_db_role_setting d
            CROSS JOIN LATERAL pg_options_to_table(d.setconfig) AS o
            WHERE d.setrole = r.oid AND o.option_name = 'temp_file_limit'
              AND d.setdatabase IN (0, (SELECT oid FROM pg_database
                                        WHERE datname = current_database()))
            ORDER BY d.setdatabase DESC LIMIT 1)
    FROM (SELECT 1) AS one LEFT JOIN pg_roles r ON r.rolname = :role
"""
#: Formatted with the role name quoted (quote_ident).
SET_ROLE = "SET LOCAL ROLE {role}"
#: The reader's temporary-file bound, for a superuser session about to drop to it.
TEMP_FILE_LIMIT = "SELECT set_config('temp_file_limit', :limit, true)"

# ---- fleet verify ----------------------------------------------------------------------------
#
# Every store's chain recomputed in one pass: an event chains from the held event before it,
# else its recorded link, else (seq 1) the genesis. Also checked: the jsonb and array columns
# say what the hashed text says (owners-at-time reads them), no hash missing once the chain
# began, the head is the newest hash (or a snapshot's anchor), the counter matches.
VERIFY = """
    WITH s AS (
        SELECT store_id, node, last_seq, head_hash, events AS counted
        FROM fleet_stores
        WHERE CAST(:node AS text) IS NULL OR node = :node
    ),
    e AS (
        SELECT e.store_id, e.seq, e.hash,
               lag(e.seq) OVER w AS pseq, lag(e.hash) OVER w AS phash,
               bool_or(e.hash IS NOT NULL) OVER w AS chain_began,
               fleet_event_canonical(e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource,
                                     e.device_ids_text, e.released) AS canon,
               -- The same set both ways, compared sorted: jsonb containment both ways was
               -- quadratic (63 s for two registrations of 29,000 devices).
               e.device_ids IS DISTINCT FROM d.named
                   OR ARRAY(SELECT DISTINCT x FROM unnest(e.devices) AS x ORDER BY 1)
                      IS DISTINCT FROM ARRAY(SELECT DISTINCT x
                                             FROM jsonb_array_elements_text(d.listed) AS x
                                             ORDER BY 1)
                   AS derived_differs
        FROM fleet_events e
        JOIN s ON s.store_id = e.store_id
        CROSS JOIN LATERAL (
            SELECT CAST(e.device_ids_text AS jsonb) AS named,
                   CASE WHEN e.op IN ('insert', 'replace', 'delete', 'import', 'backfill',
                                      'registered', 'unregistered')
                   THEN coalesce(jsonb_path_query_array(CAST(e.device_ids_text AS jsonb),
                                                        fleet_device_path(e.pod_uid)),
                                 CAST('[]' AS jsonb))
                   -- A DRA claim's event lists the claim's devices (driver/pool/device); the
                   -- node's other events (CPU, memory, topology, names) list none.
                   WHEN e.op IN ('dra-set', 'dra-delete')
                   THEN to_jsonb(fleet_dra_devices(CAST(e.device_ids_text AS jsonb)))
                   ELSE CAST('[]' AS jsonb) END AS listed
        ) d
        WINDOW w AS (PARTITION BY e.store_id ORDER BY e.seq)
    ),
    checked AS (
        SELECT e.store_id, e.seq, e.hash IS NOT NULL AS chained,
               CASE
                   WHEN e.hash IS NULL THEN
                       CASE WHEN e.chain_began THEN 'it has no hash, though the chain began '
                                                    'before it' END
                   WHEN e.derived_differs THEN
                       'its device_ids or devices column differs from the text its hash covers'
                   WHEN p.prev IS NULL THEN
                       'it chains from nothing the fleet holds (the event before it is '
                       'missing, and no link was recorded for it)'
                   WHEN sha256(p.prev || e.canon) <> e.hash THEN
                       'its hash does not cover its content and the chain before it'
               END AS problem
        FROM e
        LEFT JOIN fleet_chain_links l ON l.store_id = e.store_id AND l.seq = e.seq
        CROSS JOIN LATERAL (
            SELECT CASE WHEN e.pseq = e.seq - 1 AND e.phash IS NOT NULL THEN e.phash
                        WHEN l.prev_hash IS NOT NULL THEN l.prev_hash
                        WHEN e.seq = 1 THEN fleet_chain_genesis(e.store_id) END AS prev
        ) p
    ),
    per_store AS (
        SELECT c.store_id, count(*) AS held, count(*) FILTER (WHERE c.chained) AS chained,
               min(c.seq) FILTER (WHERE c.problem IS NOT NULL) AS first_bad,
               (array_agg(c.problem ORDER BY c.seq)
                    FILTER (WHERE c.problem IS NOT NULL))[1] AS problem
        FROM checked c GROUP BY c.store_id
    ),
    head AS (
        SELECT s.store_id,
               CASE
                   WHEN s.head_hash IS NULL THEN
                       CASE WHEN coalesce(p.chained, 0) > 0 THEN
                           'the store has chained events but no chain head' END
                   WHEN he.hash IS NOT NULL THEN
                       CASE WHEN he.hash <> s.head_hash THEN
                           'the chain head is not the hash of the newest event' END
                   WHEN hl.prev_hash IS NOT NULL THEN
                       CASE WHEN hl.prev_hash <> s.head_hash THEN
                           'the chain head is not the anchor recorded after the newest seq' END
                   ELSE 'the chain head is neither the newest event''s hash nor a recorded '
                        'anchor (the newest events are missing)'
               END AS problem
        FROM s
        LEFT JOIN per_store p ON p.store_id = s.store_id
        LEFT JOIN fleet_events he ON he.store_id = s.store_id AND he.seq = s.last_seq
        LEFT JOIN fleet_chain_links hl ON hl.store_id = s.store_id AND hl.seq = s.last_seq + 1
    )
    SELECT s.node, s.store_id, s.last_seq, coalesce(p.held, 0) AS events,
           coalesce(p.chained, 0) AS chained,
           CASE WHEN p.first_bad IS NOT NULL THEN p.first_bad
                WHEN h.problem IS NOT NULL THEN s.last_seq END AS first_broken_seq,
           coalesce(p.problem, h.problem,
                    CASE WHEN coalesce(p.held, 0) <> s.counted THEN
                        format('the store''s event count says %s, the fleet holds %s (events '
                               'deleted or added by hand)', s.counted, coalesce(p.held, 0))
                    END) AS problem
    FROM s
    LEFT JOIN per_store p ON p.store_id = s.store_id
    LEFT JOIN head h ON h.store_id = s.store_id
    ORDER BY s.node, s.store_id
"""


# ---- usage (podstore fleet usage) ---------------------------------------------------------------

#: The groups ``podstore fleet usage --by`` knows, and the columns each groups by (a physical
#: device, a pod and a store are a node's own).
USAGE_GROUPS: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace",),
    "pod": ("node", "namespace", "pod_name", "pod_uid"),
    "resource": ("resource",),
    "physical": ("node", "physical_id"),
    "node": ("node",),
}


#: Brings fleet_intervals up to the history held (f0009): its own transaction, before the read.
CATCH_UP = "SELECT fleet_intervals_catch_up()"

# What each group column is in the kept intervals (the node and the physical id are joined).
_USAGE_COLUMNS = {
    "node": "s.node",
    "namespace": "i.namespace",
    "pod_name": "i.pod_name",
    "pod_uid": "i.pod_uid",
    "resource": "i.resource",
    "physical_id": "coalesce(d.physical_id, i.mechanism || ':' || i.resource || ':' || i.device)",
}


def usage_sql(by: str, resource: bool) -> str:
    """Device-seconds per group over ``[:since, :until)`` from the kept intervals
    (fleet_intervals, caught up by :data:`CATCH_UP` first), retired stores left out, as the
    node's ``usage_sql`` (storage/sql/intervals.py) counts them, in double precision as the
    node does (``extract`` gives numeric, whose arithmetic made a third of the statement's
    time over a month of intervals). Only ``physical`` joins the devices' identity."""
    keys = ", ".join(USAGE_GROUPS[by])
    columns = ", ".join(f"{_USAGE_COLUMNS[k]} AS {k}" for k in USAGE_GROUPS[by])
    where = " AND i.resource = CAST(:resource AS text)" if resource else ""
    identity = (
        """
        LEFT JOIN v_fleet_device_identity d
          ON d.store_id = i.store_id AND d.mechanism = i.mechanism
         AND d.resource = i.resource AND d.device = i.device"""
        if "physical_id" in USAGE_GROUPS[by]
        else ""
    )
    return f"""
    SELECT {keys}, sum(seconds) AS device_seconds, count(*) AS intervals
    FROM (
        SELECT {columns},
               i.share * date_part('epoch',
                   least(coalesce(i."end", CAST(:until AS timestamptz)),
                         CAST(:until AS timestamptz))
                   - greatest(i.start, CAST(:since AS timestamptz))) AS seconds
        FROM fleet_intervals i
        JOIN fleet_stores s ON s.store_id = i.store_id{identity}
        WHERE s.retired_at IS NULL AND i.start < CAST(:until AS timestamptz)
          AND (i."end" IS NULL OR i."end" > CAST(:since AS timestamptz)){where}
    ) clipped
    GROUP BY {keys}
    ORDER BY {keys}
    """
