"""The allocation intervals kept in ``fleet_intervals``, caught up when read; a holding's share
fixed from the registration in force when it started.

Revision ID: f0009
Revises: f0008
Create Date: 2026-12-06

f0008's ``v_fleet_allocation_intervals`` computes every interval of every store from the whole
history at each read: a month's usage at 10,000 stores and 10,000,000 events took minutes.
Computing them as events arrive (statement triggers on the shipped tables) cut shipping to a
quarter, so nothing here runs on ingest:

- ``fleet_intervals`` holds the view's rows without the store's node and the physical id
  (both joined at read where asked), and ``fleet_intervals_marks`` per store the node seq the
  rows are caught up through.
- ``fleet_intervals_catch_up()`` (SECURITY DEFINER, one at a time under an advisory lock, one
  transaction per call) takes every live store whose ``last_seq`` is past its mark, recomputes
  from the store's whole history the device-plugin intervals of every pod its new events name
  (entry events, ``end`` events, pod-name events) and the DRA intervals of every claim they
  name (claim events, a claim's ``end``, the claims of a named pod), sets the shares of the
  resources whose registration changed, and moves the mark to ``last_seq``. A store with a
  snapshot past its mark (current state replaced, names and registrations with it, without
  events) is recomputed whole. The reader roles may call it and read both tables; nobody but
  the owner writes them. ``podstore fleet usage`` calls it, then sums the table.
- The share rule, in the view and the kept rows alike: a holding's share is fixed when it
  starts. A device-plugin replica ``ID::N`` of base ``ID`` shares its device with the
  resource's other replicas of that base in the registration in force at the holding's start
  (the resource's latest ``registered`` event at or before it; a registration of the same
  sync, one node transaction with one time, counts whichever seq it got; a later
  ``unregistered`` means none): 1/N of N. Without one, the store's registered devices now give
  N; unknown, 1. A device that is its own base and every DRA holding: 1.
- The upgrade fills the table from the history held and marks every store caught up.
- Downgrade: f0008's view back, the rest dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from podstore.fleet.migrations.versions import f0002_trust as f0002
from podstore.fleet.migrations.versions import f0003_node_state as f0003
from podstore.fleet.migrations.versions import f0008_physical as f0008

revision: str = "f0009"
down_revision: str | None = "f0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The advisory lock one catch-up holds for its transaction (an arbitrary constant).
CATCH_UP_LOCK = 7_302_114_598_001

COLUMNS = (
    "store_id, mechanism, resource, device, pod_uid, container, key_resource, start_seq, "
    'start, "end", end_source, namespace, pod_name, share'
)

# A replica's base: ``ID::N`` → ``ID`` (as v_fleet_device_identity and the node compute it).
_BASE = """CASE
            WHEN rtrim({d}, '0123456789') LIKE '%_::'
                 AND rtrim({d}, '0123456789') <> {d}
            THEN substr({d}, 1, length(rtrim({d}, '0123456789')) - 2)
            ELSE {d} END"""

# A holding's share, for the rows of ``ended`` (store_id, mechanism, resource, device, start):
# 1 over the count of the other replicas of its base in the registration in force at its
# start, found through the events' key index (registrations have no pod or container). ts
# never goes back along seq on a node, and one sync's events share their ts: the latest by seq
# among those at or before the start is the one in force. None in force (none yet, or
# unregistered): the registered devices now, as v_fleet_device_identity counts them. Unknown:
# whole. Counted once per registration and base, not per holding: a registration lists every
# replica, and 10,000 replica holdings each counting a 10,000-device list took minutes. The
# lists are looked up by key (LIMIT keeps a generic plan from hashing every store's), and the
# shares joined on plain columns (a join on the base expression filtered 10,000,000 pairs).
SHARE_CTES = f"""
replica_holdings AS MATERIALIZED (
    SELECT DISTINCT h.store_id, h.resource, h.device, {_BASE.format(d="h.device")} AS base,
           h.start
    FROM ended h
    WHERE h.mechanism = 'device-plugin' AND {_BASE.format(d="h.device")} <> h.device
),
in_force AS MATERIALIZED (
    SELECT h.store_id, h.resource, h.device, h.base, h.start, f.op, f.seq
    FROM replica_holdings h
    LEFT JOIN LATERAL (
        SELECT r.op, r.seq FROM fleet_events r
        WHERE r.store_id = h.store_id AND r.pod_uid IS NULL AND r.container IS NULL
          AND r.resource = h.resource AND r.op IN ('registered', 'unregistered')
          AND r.ts <= h.start
        ORDER BY r.seq DESC LIMIT 1
    ) f ON true
),
registered_then AS MATERIALIZED (
    SELECT r.store_id, r.seq, {_BASE.format(d="d.device")} AS base, count(*) AS n
    FROM (SELECT DISTINCT store_id, seq FROM in_force WHERE op = 'registered') x
    CROSS JOIN LATERAL (
        SELECT e.store_id, e.seq, e.device_ids FROM fleet_events e
        WHERE e.store_id = x.store_id AND e.seq = x.seq LIMIT 1
    ) r
    CROSS JOIN LATERAL fleet_json_texts(r.device_ids) AS d (device)
    WHERE {_BASE.format(d="d.device")} <> d.device
    GROUP BY 1, 2, 3
),
registered_now AS MATERIALIZED (
    SELECT g.store_id, g.resource, {_BASE.format(d="d.device")} AS base, count(*) AS n
    FROM (SELECT DISTINCT store_id, resource FROM in_force
          WHERE op IS DISTINCT FROM 'registered') x
    CROSS JOIN LATERAL (
        SELECT r.store_id, r.resource, r.device_ids FROM fleet_registered r
        WHERE r.store_id = x.store_id AND r.resource = x.resource LIMIT 1
    ) g
    CROSS JOIN LATERAL fleet_json_texts(g.device_ids) AS d (device)
    WHERE {_BASE.format(d="d.device")} <> d.device
    GROUP BY 1, 2, 3
),
replica_shares AS MATERIALIZED (
    SELECT f.store_id, f.resource, f.device, f.start,
           CASE WHEN f.op = 'registered' THEN CAST(1 AS double precision) / t.n
                ELSE CAST(1 AS double precision) / w.n END AS share
    FROM in_force f
    LEFT JOIN registered_then t
      ON f.op = 'registered' AND t.store_id = f.store_id AND t.seq = f.seq AND t.base = f.base
    LEFT JOIN registered_now w
      ON f.op IS DISTINCT FROM 'registered' AND w.store_id = f.store_id
     AND w.resource = f.resource AND w.base = f.base
),
shared AS MATERIALIZED (
    SELECT i.*, coalesce(rs.share, CAST(1 AS double precision)) AS share
    FROM ended i
    LEFT JOIN replica_shares rs
      ON i.mechanism = 'device-plugin' AND rs.store_id = i.store_id
     AND rs.resource = i.resource AND rs.device = i.device AND rs.start = i.start
)"""
# Every row of ``ended`` with its share (its replica share, else whole), joined apart from the
# rest (materialized) on plain columns: planned with the other joins, the shares' join pushed
# the identity's into a merge on store_id alone (484,000,000 pairs filtered for one node).
SHARE = "i.share"

# f0008's view's computation of the holdings and their ends (frozen here), its first pass
# limited to some pods' entry events and some claims' events ({dp}, {claims}) or to none (the
# whole history). A claim event has no pod and no container (the node keys a claim by its uid
# alone): said here, so that a claim's events are found through the events' key index.
_HOLDINGS = """
WITH dp_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.pod_uid IS NOT NULL
      AND e.op IN ('insert', 'replace', 'import', 'backfill', 'delete'){dp}
    WINDOW w AS (PARTITION BY e.store_id, e.pod_uid, e.container, e.resource ORDER BY e.seq)
),
dp_held AS (
    SELECT DISTINCT e.store_id, e.pod_uid, e.container, e.resource, d.device,
           e.rn, e.seq, e.ts, e.next_ts
    FROM dp_events e
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(e.device_ids) = 'object'
                                       THEN e.device_ids ELSE '{{}}' END) n
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value) = 'array'
                                                      THEN n.value ELSE '[]' END) d(device)
    WHERE e.op <> 'delete'
),
claim_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.op IN ('dra-set', 'dra-delete') AND e.pod_uid IS NULL AND e.container IS NULL{claims}
    WINDOW w AS (PARTITION BY e.store_id, e.resource ORDER BY e.seq)
),
claim_held AS (
    SELECT DISTINCT e.store_id, p.pod_uid, e.resource AS claim, r.key AS driver,
           (x.value ->> 'pool') || '/' || (x.value ->> 'device') AS device,
           e.device_ids ->> 'namespace' AS claim_namespace, e.rn, e.seq, e.ts, e.next_ts
    FROM claim_events e
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(e.device_ids -> 'pods') = 'array'
             THEN e.device_ids -> 'pods' ELSE '[]' END) p(pod_uid)
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(e.device_ids -> 'drivers') = 'object'
                                       THEN e.device_ids -> 'drivers' ELSE '{{}}' END) r
    CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(r.value) = 'array'
                                                 THEN r.value ELSE '[]' END) x
    WHERE e.op = 'dra-set'
),
runs AS (
    SELECT store_id, 'device-plugin' AS mechanism, resource, device, pod_uid, container,
           resource AS key_resource, CAST(NULL AS text) AS claim_namespace, seq, ts, next_ts,
           rn - row_number() OVER (PARTITION BY store_id, pod_uid, container, resource, device
                                   ORDER BY rn) AS grp
    FROM dp_held
    UNION ALL
    SELECT store_id, 'dra', driver, device, pod_uid, CAST(NULL AS text), claim,
           claim_namespace, seq, ts, next_ts,
           rn - row_number() OVER (PARTITION BY store_id, claim, pod_uid, driver, device
                                   ORDER BY rn)
    FROM claim_held
),
holdings AS (
    SELECT store_id, mechanism, resource, device, pod_uid, container, key_resource,
           max(claim_namespace) AS claim_namespace, min(seq) AS start_seq, min(ts) AS start,
           CASE WHEN bool_or(next_ts IS NULL) THEN NULL ELSE max(next_ts) END AS until_ts
    FROM runs
    GROUP BY store_id, mechanism, key_resource, pod_uid, container, resource, device, grp
),
ended AS MATERIALIZED (
    SELECT h.*, ev.at AS ev_at, ev.source AS ev_source
    FROM holdings h
    LEFT JOIN LATERAL (
        SELECT CAST(x.device_ids ->> 'at' AS timestamptz) AS at,
               x.device_ids ->> 'source' AS source
        FROM fleet_events x
        WHERE x.store_id = h.store_id AND x.pod_uid = h.pod_uid
          AND x.container IS NOT DISTINCT FROM h.container AND x.resource = h.key_resource
          AND x.seq > h.start_seq AND x.op = 'end'
          AND CAST(x.device_ids ->> 'at' AS timestamptz) >= h.start
          AND (h.until_ts IS NULL OR CAST(x.device_ids ->> 'at' AS timestamptz) < h.until_ts)
        ORDER BY 1, 2
        LIMIT 1
    ) ev ON true
),""" + SHARE_CTES.replace("{", "{{").replace("}", "}}")

_NAME = """(SELECT n.device_ids ->> '{field}' FROM fleet_events n
                 WHERE n.store_id = i.store_id AND n.pod_uid = i.pod_uid
                   AND n.container IS NULL AND n.resource = 'pod-name' AND n.op = 'node-set'
                 ORDER BY n.seq DESC LIMIT 1)"""

_END = """coalesce(i.ev_at, i.until_ts)"""
_END_SOURCE = """CASE WHEN i.ev_at IS NOT NULL THEN i.ev_source
            WHEN i.until_ts IS NULL THEN NULL
            WHEN i.mechanism = 'dra' THEN 'dra'
            ELSE 'checkpoint' END"""

# The kept rows, in COLUMNS' order.
_ROWS = (
    _HOLDINGS
    + f"""
SELECT i.store_id, i.mechanism, i.resource, i.device, i.pod_uid, i.container, i.key_resource,
       i.start_seq, i.start, {_END}, {_END_SOURCE},
       coalesce(pn.value ->> 'namespace', {_NAME.format(field="namespace")},
                i.claim_namespace),
       coalesce(pn.value ->> 'name', {_NAME.format(field="name")}),
       {SHARE}
FROM shared i{{names}}
"""
)

# The pod's name item: joined (the whole history), or looked up interval by interval through
# its key (a few keys: a generic plan would hash every store's items; LIMIT keeps the planner
# from turning the look-up back into that join, the key being unique anyway).
_NAMES_JOINED = """
LEFT JOIN fleet_node_items pn
  ON pn.store_id = i.store_id
 AND pn.item_key = CAST(jsonb_build_array(i.pod_uid, CAST(NULL AS text), 'pod-name') AS text)"""
_NAMES_LOOKED_UP = """
LEFT JOIN LATERAL (
    SELECT n.value FROM fleet_node_items n
    WHERE n.store_id = i.store_id
      AND n.item_key = CAST(jsonb_build_array(i.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
    LIMIT 1
) pn ON true"""

#: Every store's intervals from the whole history (the upgrade; tests compare the kept rows).
ALL_ROWS = _ROWS.format(dp="", claims="", names=_NAMES_JOINED)
FILL = f"INSERT INTO fleet_intervals ({COLUMNS})" + ALL_ROWS

#: Every store marked caught up through its newest seq (before FILL: a ship committed between
#: the two is past the mark, and taken in again by the next catch-up).
MARK_ALL = (
    "INSERT INTO fleet_intervals_marks (store_id, seq) SELECT store_id, last_seq FROM fleet_stores"
)

#: The intervals of some stores' pods and claims (the catch-up's keys: pairs of arrays), each
#: key's events found through the events' key index.
KEYED_ROWS = _ROWS.format(
    dp="""
      AND (e.store_id, e.pod_uid) IN (
          SELECT k.store_id, k.pod_uid
          FROM unnest(l_pod_stores, l_pods) AS k (store_id, pod_uid))""",
    claims="""
      AND (e.store_id, e.resource) IN (
          SELECT k.store_id, k.claim
          FROM unnest(l_claim_stores, l_claims) AS k (store_id, claim))""",
    names=_NAMES_LOOKED_UP,
)
#: One store's intervals, all of them (after a snapshot).
STORE_ROWS = _ROWS.format(
    dp="\n      AND e.store_id = p_store",
    claims="\n      AND e.store_id = p_store",
    names=_NAMES_LOOKED_UP,
)

_SETTINGS = "SET search_path = pg_catalog, @SCHEMA@, pg_temp SET jit = off"

REFRESH = f"""
CREATE FUNCTION fleet_intervals_refresh(p_store uuid)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER {_SETTINGS}
AS $fn$
BEGIN
    DELETE FROM fleet_intervals i WHERE i.store_id = p_store;
    INSERT INTO fleet_intervals ({COLUMNS}){STORE_ROWS.rstrip()};
END
$fn$
"""
REFRESH_NAME = "fleet_intervals_refresh(uuid)"

# Set-based: a handful of statements per call whatever the number of stores behind (a loop of
# them per store cost 3.5 ms a store before any work).
CATCH_UP = f"""
CREATE FUNCTION fleet_intervals_catch_up() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER {_SETTINGS}
AS $fn$
DECLARE
    l_stores uuid[];
    l_lasts bigint[];
    l_marks bigint[];
    l_whole uuid[];
    l_pod_stores uuid[];
    l_pods text[];
    l_claim_stores uuid[];
    l_claims text[];
    l_reg_stores uuid[];
    l_regs text[];
    l_events bigint;
    l_store uuid;
BEGIN
    -- One at a time: two would recompute the same keys, the second's DELETE waiting on the
    -- first's rows and then inserting beside them.
    PERFORM pg_advisory_xact_lock({CATCH_UP_LOCK});
    -- The stores in service past their marks; each mark moves to the last_seq read here (a
    -- later statement may see more events: taken in again next time).
    SELECT array_agg(s.store_id), array_agg(s.last_seq), array_agg(coalesce(m.seq, 0))
    INTO l_stores, l_lasts, l_marks
    FROM fleet_stores s
    LEFT JOIN fleet_intervals_marks m ON m.store_id = s.store_id
    WHERE s.retired_at IS NULL AND s.last_seq > coalesce(m.seq, 0);
    IF l_stores IS NULL THEN
        RETURN 0;
    END IF;
    -- A snapshot past the mark replaced the store's state (names, registrations) without
    -- events: the whole store is recomputed.
    SELECT array_agg(DISTINCT n.store_id) INTO l_whole
    FROM unnest(l_stores, l_marks) AS b (store_id, mark)
    JOIN fleet_snapshots n ON n.store_id = b.store_id AND n.at_seq > b.mark;
    l_whole := coalesce(l_whole, CAST(ARRAY[] AS uuid[]));
    -- What the events past the marks name: pods (entry, end, pod-name events), claims (claim
    -- events, a claim's end: no container), registered resources.
    WITH past AS MATERIALIZED (
        SELECT e.store_id, e.op, e.pod_uid, e.container, e.resource
        FROM unnest(l_stores, l_marks) AS b (store_id, mark)
        JOIN fleet_events e ON e.store_id = b.store_id AND e.seq > b.mark
    ),
    named AS MATERIALIZED (
        SELECT DISTINCT p.store_id,
               CASE WHEN p.op IN ('dra-set', 'dra-delete')
                         OR (p.op = 'end' AND p.container IS NULL) THEN 'c'
                    WHEN p.op IN ('registered', 'unregistered') THEN 'r'
                    ELSE 'p' END AS kind,
               CASE WHEN p.op IN ('dra-set', 'dra-delete', 'registered', 'unregistered')
                         OR (p.op = 'end' AND p.container IS NULL) THEN p.resource
                    ELSE p.pod_uid END AS name
        FROM past p
        WHERE p.store_id <> ALL(l_whole)
          AND (p.op IN ('insert', 'replace', 'import', 'backfill', 'delete', 'end', 'dra-set',
                        'dra-delete', 'registered', 'unregistered')
               OR (p.op IN ('node-set', 'node-delete') AND p.resource = 'pod-name'))
    )
    SELECT (SELECT count(*) FROM past),
           array_agg(n.store_id ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'p'),
           array_agg(n.name ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'p'),
           array_agg(n.store_id ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'c'),
           array_agg(n.name ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'c'),
           array_agg(n.store_id ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'r'),
           array_agg(n.name ORDER BY n.store_id, n.name) FILTER (WHERE n.kind = 'r')
    INTO l_events, l_pod_stores, l_pods, l_claim_stores, l_claims, l_reg_stores, l_regs
    FROM named n WHERE n.name IS NOT NULL;
    l_pod_stores := coalesce(l_pod_stores, CAST(ARRAY[] AS uuid[]));
    l_pods := coalesce(l_pods, CAST(ARRAY[] AS text[]));
    -- A pod's DRA intervals carry its name and its ends too: the claims it holds are
    -- recomputed with it.
    SELECT array_agg(c.store_id), array_agg(c.claim) INTO l_claim_stores, l_claims
    FROM (SELECT k.store_id, k.claim
          FROM unnest(coalesce(l_claim_stores, CAST(ARRAY[] AS uuid[])),
                      coalesce(l_claims, CAST(ARRAY[] AS text[]))) AS k (store_id, claim)
          UNION
          SELECT i.store_id, i.key_resource
          FROM unnest(l_pod_stores, l_pods) AS k (store_id, pod_uid)
          JOIN fleet_intervals i ON i.store_id = k.store_id AND i.pod_uid = k.pod_uid
          WHERE i.mechanism = 'dra') c;
    l_claim_stores := coalesce(l_claim_stores, CAST(ARRAY[] AS uuid[]));
    l_claims := coalesce(l_claims, CAST(ARRAY[] AS text[]));
    DELETE FROM fleet_intervals i
    USING unnest(l_pod_stores, l_pods) AS k (store_id, pod_uid)
    WHERE i.store_id = k.store_id AND i.pod_uid = k.pod_uid
      AND i.mechanism = 'device-plugin';
    DELETE FROM fleet_intervals i
    USING unnest(l_claim_stores, l_claims) AS k (store_id, claim)
    WHERE i.store_id = k.store_id AND i.key_resource = k.claim AND i.mechanism = 'dra';
    IF cardinality(l_pods) > 0 OR cardinality(l_claims) > 0 THEN
        INSERT INTO fleet_intervals ({COLUMNS}){KEYED_ROWS.rstrip()};
    END IF;
    IF l_regs IS NOT NULL THEN
        -- A registration of a holding's own sync may arrive after it; a holding without one
        -- in force takes the registered devices now. (A device-plugin row's key is its
        -- resource: the claim index finds them.)
        WITH ended AS MATERIALIZED (
            SELECT i.ctid AS row_id, i.store_id, i.mechanism, i.resource, i.device, i.start
            FROM unnest(l_reg_stores, l_regs) AS k (store_id, resource)
            JOIN fleet_intervals i
              ON i.store_id = k.store_id AND i.key_resource = k.resource
             AND i.resource = k.resource AND i.mechanism = 'device-plugin'
            -- (the pods recomputed above have theirs)
            WHERE (i.store_id, i.pod_uid) NOT IN (
                SELECT p.store_id, p.pod_uid
                FROM unnest(l_pod_stores, l_pods) AS p (store_id, pod_uid))
        ),{SHARE_CTES.replace(chr(10), chr(10) + "        ")}
        -- By row id: a join on the key, planned before the rows it reads were counted, took
        -- 20 s for one 1,000-pod node.
        UPDATE fleet_intervals u SET share = x.share
        FROM shared x
        WHERE u.ctid = x.row_id AND u.share IS DISTINCT FROM x.share;
    END IF;
    FOREACH l_store IN ARRAY l_whole LOOP
        PERFORM fleet_intervals_refresh(l_store);
    END LOOP;
    INSERT INTO fleet_intervals_marks (store_id, seq)
    SELECT b.store_id, b.seq FROM unnest(l_stores, l_lasts) AS b (store_id, seq)
    ON CONFLICT (store_id) DO UPDATE SET seq = excluded.seq;
    RETURN l_events;
END
$fn$
"""
CATCH_UP_NAME = "fleet_intervals_catch_up()"

# ---- the view: a frozen copy of views.py as of this revision ------------------------------------

V_FLEET_ALLOCATION_INTERVALS = (
    "\nCREATE VIEW v_fleet_allocation_intervals AS"
    + _HOLDINGS.format(dp="", claims="")
    + f""",
-- The devices' identity computed once and joined on all four columns (joined as the view, its
-- per-store subquery was merged on store_id alone: 484,000,000 pairs filtered for one node).
identity AS MATERIALIZED (
    SELECT v.store_id, v.mechanism, v.resource, v.device, v.physical_id
    FROM v_fleet_device_identity v
)
SELECT s.node AS node, i.store_id AS store_id, i.mechanism AS mechanism,
       i.resource AS resource, i.device AS device,
       coalesce(d.physical_id, i.mechanism || ':' || i.resource || ':' || i.device)
           AS physical_id,
       {SHARE} AS share,
       i.pod_uid AS pod_uid,
       coalesce(pn.value ->> 'namespace', {_NAME.format(field="namespace")},
                i.claim_namespace) AS namespace,
       coalesce(pn.value ->> 'name', {_NAME.format(field="name")}) AS pod_name,
       i.container AS container, i.start AS start, {_END} AS "end",
       {_END_SOURCE} AS end_source
FROM shared i
JOIN fleet_stores s ON s.store_id = i.store_id
LEFT JOIN fleet_node_items pn
  ON pn.store_id = i.store_id
 AND pn.item_key = CAST(jsonb_build_array(i.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
LEFT JOIN identity d
  ON d.store_id = i.store_id AND d.mechanism = i.mechanism AND d.resource = i.resource
 AND d.device = i.device
WHERE s.retired_at IS NULL
"""
)

_TABLES = ("fleet_intervals", "fleet_intervals_marks")


def upgrade() -> None:
    schema = f0002._schema()
    readers = f0003._readers("v_fleet_allocation_intervals")
    op.create_table(
        "fleet_intervals",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("mechanism", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("container", sa.Text(), nullable=True),
        sa.Column("key_resource", sa.Text(), nullable=False),
        sa.Column("start_seq", sa.BigInteger(), nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_source", sa.Text(), nullable=True),
        sa.Column("namespace", sa.Text(), nullable=True),
        sa.Column("pod_name", sa.Text(), nullable=True),
        sa.Column("share", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id", "start_seq", "pod_uid", "resource", "device", name="pk_fleet_intervals"
        ),
    )
    op.create_index("ix_fleet_intervals_pod", "fleet_intervals", ["store_id", "pod_uid"])
    op.create_index("ix_fleet_intervals_claim", "fleet_intervals", ["store_id", "key_resource"])
    op.create_table(
        "fleet_intervals_marks",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("store_id", name="pk_fleet_intervals_marks"),
    )
    for create in (REFRESH, CATCH_UP):
        f0003._execute(f0003._render(create, schema))
    for signature in (REFRESH_NAME, CATCH_UP_NAME):
        f0003._execute(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")
    # Marks first: whatever a ship commits meanwhile is past them, and recomputed next time.
    f0003._execute(MARK_ALL)
    f0003._execute(FILL)
    op.execute("DROP VIEW v_fleet_allocation_intervals")
    op.execute(V_FLEET_ALLOCATION_INTERVALS)
    for role in readers:
        who = f0003._ident(role)
        op.execute(f"GRANT SELECT ON {', '.join(_TABLES)}, v_fleet_allocation_intervals TO {who}")
        f0003._execute(f"GRANT EXECUTE ON FUNCTION {CATCH_UP_NAME} TO {who}")


def downgrade() -> None:
    readers = f0003._readers("v_fleet_allocation_intervals")
    op.execute("DROP VIEW v_fleet_allocation_intervals")
    op.execute(f0008.FLEET_ALLOCATION_INTERVALS)
    for role in readers:
        op.execute(f"GRANT SELECT ON v_fleet_allocation_intervals TO {f0003._ident(role)}")
    for signature in (CATCH_UP_NAME, REFRESH_NAME):
        f0003._execute(f"DROP FUNCTION {signature}")
    for table in reversed(_TABLES):
        op.drop_table(table)
