"""Physical devices in the fleet: the node's CDI devices and entry responses ship as current
state; the fleet twins of the node's physical views; the intervals take their identity.

Revision ID: f0008
Revises: f0007
Create Date: 2026-12-06

- ``fleet_cdi_device_nodes`` (the node's ``cdi_device_nodes``) and ``fleet_response_nodes``
  (the host device nodes and CDI names each entry's plugin response names) hold, per store, the
  facts the node's ``v_device_identity`` is computed from beyond what the fleet already had.
  They write no history on the node, so they travel as current state: the last transaction of
  every ship sends them whole, read in the snapshot of its events, to ``fleet_ship_physical``,
  a SECURITY DEFINER function like the other entry points (the caller may ship for the node,
  the store is that node's and not retired, else the refusal as ``fleet_ship_check`` words it,
  and nothing written); it rewrites a set only when it differs. Node roles get EXECUTE on it
  here (those holding it on ``fleet_ship_open``) and from ``fleet grant-node``; no role but
  the owner writes the tables.
- Views ``v_fleet_device_identity``, ``v_fleet_physical_devices``,
  ``v_fleet_physical_double_allocations`` (frozen copies of ``views.py`` as of this revision),
  and ``v_fleet_allocation_intervals`` re-created to take ``physical_id`` and ``share`` from
  ``v_fleet_device_identity``. The reader roles ``fleet grant-reader`` made read them and the
  new tables.
- ``fleet_json_texts``, ``fleet_json_items``, ``fleet_json_entries``: JSON lists unpacked for
  the views with a planner estimate of a couple of items.
- Downgrade: f0007's intervals view back, the rest dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from podstore.fleet.migrations.versions import f0002_trust as f0002
from podstore.fleet.migrations.versions import f0003_node_state as f0003
from podstore.fleet.migrations.versions import f0007_end_events as f0007

revision: str = "f0008"
down_revision: str | None = "f0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("fleet_cdi_device_nodes", "fleet_response_nodes")

SHIP_PHYSICAL = f"""
CREATE FUNCTION fleet_ship_physical(p_store_id uuid, p_node text, p_cdi json, p_responses json)
RETURNS TABLE (changed bigint, refused text)
LANGUAGE plpgsql SECURITY DEFINER {f0002._SETTINGS}
AS $fn$
DECLARE
    st fleet_stores;
    l_reason text;
    l_changed bigint := 0;
BEGIN
    st := fleet_ship_lock(p_store_id, p_node);
    l_reason := fleet_ship_check(st, p_node);
    IF l_reason IS NOT NULL THEN
        RETURN QUERY SELECT CAST(0 AS bigint), l_reason;
        RETURN;
    END IF;
    IF EXISTS (SELECT spec_path, name, host_path
               FROM json_to_recordset(p_cdi) AS c (spec_path text, name text, host_path text)
               EXCEPT
               SELECT spec_path, name, host_path FROM fleet_cdi_device_nodes
               WHERE store_id = p_store_id)
       OR EXISTS (SELECT spec_path, name, host_path FROM fleet_cdi_device_nodes
                  WHERE store_id = p_store_id
                  EXCEPT
                  SELECT spec_path, name, host_path
                  FROM json_to_recordset(p_cdi) AS c (spec_path text, name text, host_path text))
    THEN
        DELETE FROM fleet_cdi_device_nodes WHERE store_id = p_store_id;
        INSERT INTO fleet_cdi_device_nodes (store_id, spec_path, name, host_path)
        SELECT DISTINCT p_store_id, spec_path, name, host_path
        FROM json_to_recordset(p_cdi) AS c (spec_path text, name text, host_path text);
        l_changed := l_changed + 1;
    END IF;
    IF EXISTS (SELECT pod_uid, container, resource, kind, value
               FROM json_to_recordset(p_responses)
                    AS r (pod_uid text, container text, resource text, kind text, value text)
               EXCEPT
               SELECT pod_uid, container, resource, kind, value FROM fleet_response_nodes
               WHERE store_id = p_store_id)
       OR EXISTS (SELECT pod_uid, container, resource, kind, value FROM fleet_response_nodes
                  WHERE store_id = p_store_id
                  EXCEPT
                  SELECT pod_uid, container, resource, kind, value
                  FROM json_to_recordset(p_responses)
                       AS r (pod_uid text, container text, resource text, kind text,
                             value text))
    THEN
        DELETE FROM fleet_response_nodes WHERE store_id = p_store_id;
        INSERT INTO fleet_response_nodes (store_id, pod_uid, container, resource, kind, value)
        SELECT DISTINCT p_store_id, pod_uid, container, resource, kind, value
        FROM json_to_recordset(p_responses)
             AS r (pod_uid text, container text, resource text, kind text, value text);
        l_changed := l_changed + 1;
    END IF;
    RETURN QUERY SELECT l_changed, CAST(NULL AS text);
END
$fn$
"""
SHIP_PHYSICAL_NAME = "fleet_ship_physical(uuid, text, json, json)"

# JSON lists unpacked for the views with an estimate of a couple of items (jsonb's own functions
# count 100, and the products through the views' CTEs made hash joins spill into thousands of
# batches). Their SET clause keeps PostgreSQL from inlining them, which would drop the estimate;
# pure, so callable by anyone.
JSON_FUNCTIONS = (
    """
CREATE FUNCTION fleet_json_texts(v jsonb) RETURNS SETOF text
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 2 SET search_path = pg_catalog
AS $fn$ SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(v) = 'array' THEN v END) $fn$
""",
    """
CREATE FUNCTION fleet_json_items(v jsonb) RETURNS SETOF jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 2 SET search_path = pg_catalog
AS $fn$ SELECT jsonb_array_elements(CASE WHEN jsonb_typeof(v) = 'array' THEN v END) $fn$
""",
    """
CREATE FUNCTION fleet_json_entries(v jsonb, OUT key text, OUT value jsonb) RETURNS SETOF record
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 1 SET search_path = pg_catalog
AS $fn$ SELECT * FROM jsonb_each(CASE WHEN jsonb_typeof(v) = 'object' THEN v END) $fn$
""",
)
JSON_FUNCTION_NAMES = (
    "fleet_json_entries(jsonb)",
    "fleet_json_items(jsonb)",
    "fleet_json_texts(jsonb)",
)

# ---- views: frozen copies of views.py as of this revision --------------------------------------

FLEET_DEVICE_IDENTITY = """
CREATE VIEW v_fleet_device_identity AS
SELECT s.node AS node, s.store_id AS store_id, x.mechanism AS mechanism,
       x.resource AS resource, x.device AS device, x.physical_id AS physical_id,
       x.resolved AS resolved, x.share AS share
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH

    held_dp (alloc_id, resource, device) AS MATERIALIZED (
        SELECT DISTINCT CAST(jsonb_build_array(a.pod_uid, a.container, a.resource) AS text),
               a.resource, a.device_id
        FROM fleet_allocations a WHERE a.store_id = s.store_id
    ),
    reg (resource, device, base) AS MATERIALIZED (
        SELECT r.resource, d.device, CASE
            WHEN rtrim(d.device, '0123456789') LIKE '%_::'
                 AND rtrim(d.device, '0123456789') <> d.device
            THEN substr(d.device, 1, length(rtrim(d.device, '0123456789')) - 2)
            ELSE d.device END
        FROM fleet_registered r
        CROSS JOIN LATERAL fleet_json_texts(r.device_ids) AS d (device)
        WHERE r.store_id = s.store_id
    ),
    cdi (name, node) AS MATERIALIZED (
        SELECT c.name, c.host_path FROM fleet_cdi_device_nodes c WHERE c.store_id = s.store_id
    ),
    resp (alloc_id, kind, value) AS MATERIALIZED (
        SELECT CAST(jsonb_build_array(r.pod_uid, r.container, r.resource) AS text), r.kind,
               r.value
        FROM fleet_response_nodes r WHERE r.store_id = s.store_id
    ),
    dp (alloc_id, resource, device, base) AS MATERIALIZED (
        SELECT alloc_id, resource, device, CASE
            WHEN rtrim(device, '0123456789') LIKE '%_::'
                 AND rtrim(device, '0123456789') <> device
            THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
            ELSE device END FROM held_dp
        UNION ALL
        SELECT NULL, resource, device, base FROM reg r
        WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                          WHERE h.resource = r.resource AND h.device = r.device)
    ),
    dp_own (resource, device, node) AS MATERIALIZED (
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN cdi n ON n.name = h.resource || '=' || h.base
        UNION
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN resp r ON r.alloc_id = h.alloc_id AND r.kind = 'cdi'
        JOIN cdi n ON n.name = r.value
        WHERE substr(r.value, strpos(r.value, '=') + 1) IN (h.base, h.device)
    ),
    dp_entry (alloc_id, node) AS MATERIALIZED (
        SELECT alloc_id, value FROM resp WHERE kind = 'host' AND value <> ''
        UNION
        SELECT r.alloc_id, n.node FROM resp r JOIN cdi n ON n.name = r.value
        WHERE r.kind = 'cdi'
    ),
    dp_nodes (resource, device, node) AS (
        SELECT resource, device, node FROM dp_own
        UNION
        SELECT h.resource, h.device, e.node FROM dp h
        JOIN dp_entry e ON e.alloc_id = h.alloc_id
        WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                          AND o.device = h.device)
    ),
    claims (claim, namespace, pods, driver, device, cdi) AS MATERIALIZED (
        SELECT i.item_key, i.value ->> 'namespace', i.value -> 'pods', d.key,
               (x.value ->> 'pool') || '/' || (x.value ->> 'device'), x.value -> 'cdi'
        FROM fleet_node_items i
        CROSS JOIN LATERAL fleet_json_entries(i.value -> 'drivers') AS d
        CROSS JOIN LATERAL fleet_json_items(d.value) AS x (value)
        WHERE i.store_id = s.store_id AND i.kind = 'dra'
    ),
    claim_pods (claim, driver, device, namespace, pod_uid) AS MATERIALIZED (
        SELECT c.claim, c.driver, c.device, c.namespace, p.pod_uid FROM claims c
        LEFT JOIN LATERAL fleet_json_texts(c.pods) AS p (pod_uid) ON true
    ),
    dra (resource, device, holders) AS MATERIALIZED (
        SELECT driver, device, count(*) FROM claim_pods GROUP BY driver, device
    ),
    claim_device_nodes (resource, device, node) AS (
        SELECT DISTINCT c.driver, c.device, n.node
        FROM claims c
        CROSS JOIN LATERAL fleet_json_texts(c.cdi) AS j (name)
        JOIN cdi n ON n.name = j.name
    ),
    replicas (resource, base, n) AS MATERIALIZED (
        SELECT resource, base, count(*) FROM reg WHERE device <> base GROUP BY resource, base
    ),
    devs (mechanism, resource, device, base, share) AS (
        SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
               CASE WHEN h.base = h.device THEN CAST(1 AS double precision)
                    ELSE CAST(1 AS double precision) / g.n END
        FROM dp h
        LEFT JOIN replicas g ON g.resource = h.resource AND g.base = h.base
        UNION ALL
        SELECT 'dra', resource, device, device, CAST(1 AS double precision) / holders FROM dra
    ),
    nodes (mechanism, resource, device, node) AS MATERIALIZED (
        SELECT 'device-plugin', resource, device, node FROM dp_nodes
        UNION ALL
        SELECT 'dra', resource, device, node FROM claim_device_nodes
    ),
    named (mechanism, resource, device, physical_id) AS MATERIALIZED (
        SELECT mechanism, resource, device,
               '[' || string_agg(CAST(to_json(node) AS text), ',' ORDER BY node COLLATE "C")
               || ']'
        FROM nodes GROUP BY mechanism, resource, device
    ),
    ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
        SELECT v.mechanism, v.resource, v.device, v.base,
               coalesce(n.physical_id, v.mechanism || ':' || v.resource || ':' || v.base),
               CASE WHEN n.physical_id IS NOT NULL THEN 1 ELSE 0 END, v.share
        FROM devs v
        LEFT JOIN named n
          ON n.mechanism = v.mechanism AND n.resource = v.resource AND n.device = v.device
    )
    SELECT mechanism, resource, device, physical_id, resolved, share FROM ident
) x
WHERE s.retired_at IS NULL
"""

FLEET_PHYSICAL_DEVICES = """
CREATE VIEW v_fleet_physical_devices AS
SELECT s.node AS node, s.store_id AS store_id, x.physical_id AS physical_id,
       x.resolved AS resolved, x.mechanism AS mechanism, x.resource AS resource,
       x.device AS device, x.pod_uid AS pod_uid, x.namespace AS namespace,
       x.pod_name AS pod_name, x.container AS container, x.share AS share
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH

    held_dp (alloc_id, resource, device) AS MATERIALIZED (
        SELECT DISTINCT CAST(jsonb_build_array(a.pod_uid, a.container, a.resource) AS text),
               a.resource, a.device_id
        FROM fleet_allocations a WHERE a.store_id = s.store_id
    ),
    reg (resource, device, base) AS MATERIALIZED (
        SELECT r.resource, d.device, CASE
            WHEN rtrim(d.device, '0123456789') LIKE '%_::'
                 AND rtrim(d.device, '0123456789') <> d.device
            THEN substr(d.device, 1, length(rtrim(d.device, '0123456789')) - 2)
            ELSE d.device END
        FROM fleet_registered r
        CROSS JOIN LATERAL fleet_json_texts(r.device_ids) AS d (device)
        WHERE r.store_id = s.store_id
    ),
    cdi (name, node) AS MATERIALIZED (
        SELECT c.name, c.host_path FROM fleet_cdi_device_nodes c WHERE c.store_id = s.store_id
    ),
    resp (alloc_id, kind, value) AS MATERIALIZED (
        SELECT CAST(jsonb_build_array(r.pod_uid, r.container, r.resource) AS text), r.kind,
               r.value
        FROM fleet_response_nodes r WHERE r.store_id = s.store_id
    ),
    dp (alloc_id, resource, device, base) AS MATERIALIZED (
        SELECT alloc_id, resource, device, CASE
            WHEN rtrim(device, '0123456789') LIKE '%_::'
                 AND rtrim(device, '0123456789') <> device
            THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
            ELSE device END FROM held_dp
        UNION ALL
        SELECT NULL, resource, device, base FROM reg r
        WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                          WHERE h.resource = r.resource AND h.device = r.device)
    ),
    dp_own (resource, device, node) AS MATERIALIZED (
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN cdi n ON n.name = h.resource || '=' || h.base
        UNION
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN resp r ON r.alloc_id = h.alloc_id AND r.kind = 'cdi'
        JOIN cdi n ON n.name = r.value
        WHERE substr(r.value, strpos(r.value, '=') + 1) IN (h.base, h.device)
    ),
    dp_entry (alloc_id, node) AS MATERIALIZED (
        SELECT alloc_id, value FROM resp WHERE kind = 'host' AND value <> ''
        UNION
        SELECT r.alloc_id, n.node FROM resp r JOIN cdi n ON n.name = r.value
        WHERE r.kind = 'cdi'
    ),
    dp_nodes (resource, device, node) AS (
        SELECT resource, device, node FROM dp_own
        UNION
        SELECT h.resource, h.device, e.node FROM dp h
        JOIN dp_entry e ON e.alloc_id = h.alloc_id
        WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                          AND o.device = h.device)
    ),
    claims (claim, namespace, pods, driver, device, cdi) AS MATERIALIZED (
        SELECT i.item_key, i.value ->> 'namespace', i.value -> 'pods', d.key,
               (x.value ->> 'pool') || '/' || (x.value ->> 'device'), x.value -> 'cdi'
        FROM fleet_node_items i
        CROSS JOIN LATERAL fleet_json_entries(i.value -> 'drivers') AS d
        CROSS JOIN LATERAL fleet_json_items(d.value) AS x (value)
        WHERE i.store_id = s.store_id AND i.kind = 'dra'
    ),
    claim_pods (claim, driver, device, namespace, pod_uid) AS MATERIALIZED (
        SELECT c.claim, c.driver, c.device, c.namespace, p.pod_uid FROM claims c
        LEFT JOIN LATERAL fleet_json_texts(c.pods) AS p (pod_uid) ON true
    ),
    dra (resource, device, holders) AS MATERIALIZED (
        SELECT driver, device, count(*) FROM claim_pods GROUP BY driver, device
    ),
    claim_device_nodes (resource, device, node) AS (
        SELECT DISTINCT c.driver, c.device, n.node
        FROM claims c
        CROSS JOIN LATERAL fleet_json_texts(c.cdi) AS j (name)
        JOIN cdi n ON n.name = j.name
    ),
    replicas (resource, base, n) AS MATERIALIZED (
        SELECT resource, base, count(*) FROM reg WHERE device <> base GROUP BY resource, base
    ),
    devs (mechanism, resource, device, base, share) AS (
        SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
               CASE WHEN h.base = h.device THEN CAST(1 AS double precision)
                    ELSE CAST(1 AS double precision) / g.n END
        FROM dp h
        LEFT JOIN replicas g ON g.resource = h.resource AND g.base = h.base
        UNION ALL
        SELECT 'dra', resource, device, device, CAST(1 AS double precision) / holders FROM dra
    ),
    nodes (mechanism, resource, device, node) AS MATERIALIZED (
        SELECT 'device-plugin', resource, device, node FROM dp_nodes
        UNION ALL
        SELECT 'dra', resource, device, node FROM claim_device_nodes
    ),
    named (mechanism, resource, device, physical_id) AS MATERIALIZED (
        SELECT mechanism, resource, device,
               '[' || string_agg(CAST(to_json(node) AS text), ',' ORDER BY node COLLATE "C")
               || ']'
        FROM nodes GROUP BY mechanism, resource, device
    ),
    ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
        SELECT v.mechanism, v.resource, v.device, v.base,
               coalesce(n.physical_id, v.mechanism || ':' || v.resource || ':' || v.base),
               CASE WHEN n.physical_id IS NOT NULL THEN 1 ELSE 0 END, v.share
        FROM devs v
        LEFT JOIN named n
          ON n.mechanism = v.mechanism AND n.resource = v.resource AND n.device = v.device
    ),
    holders (mechanism, resource, device, pod_uid, container, namespace) AS (
        SELECT DISTINCT 'device-plugin', a.resource, a.device_id, a.pod_uid, a.container,
               CAST(NULL AS text)
        FROM fleet_allocations a WHERE a.store_id = s.store_id
        UNION ALL
        SELECT 'dra', driver, device, pod_uid, CAST(NULL AS text), namespace FROM claim_pods
    ),
    names (pod_uid, namespace, name) AS MATERIALIZED (
        SELECT n.pod_uid, n.value ->> 'namespace', n.value ->> 'name' FROM fleet_node_items n
        WHERE n.store_id = s.store_id AND n.kind = 'node' AND n.resource = 'pod-name'
    )
    SELECT i.physical_id, i.resolved, h.mechanism, h.resource, h.device, h.pod_uid,
           coalesce(n.namespace, h.namespace) AS namespace, n.name AS pod_name, h.container,
           i.share
    FROM holders h
    JOIN ident i ON i.mechanism = h.mechanism AND i.resource = h.resource
     AND i.device = h.device
    LEFT JOIN names n ON n.pod_uid = h.pod_uid
) x
WHERE s.retired_at IS NULL
"""

FLEET_PHYSICAL_DOUBLE_ALLOCATIONS = """
CREATE VIEW v_fleet_physical_double_allocations AS
SELECT s.node AS node, s.store_id AS store_id, x.physical_id AS physical_id,
       x.mechanism AS mechanism, x.resource AS resource, x.device AS device,
       x.pod_uid AS pod_uid, x.namespace AS namespace, x.pod_name AS pod_name,
       x.container AS container, x.pod_count AS pod_count
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH

    held_dp (alloc_id, resource, device) AS MATERIALIZED (
        SELECT DISTINCT CAST(jsonb_build_array(a.pod_uid, a.container, a.resource) AS text),
               a.resource, a.device_id
        FROM fleet_allocations a WHERE a.store_id = s.store_id
    ),
    reg (resource, device, base) AS MATERIALIZED (
        SELECT r.resource, d.device, CASE
            WHEN rtrim(d.device, '0123456789') LIKE '%_::'
                 AND rtrim(d.device, '0123456789') <> d.device
            THEN substr(d.device, 1, length(rtrim(d.device, '0123456789')) - 2)
            ELSE d.device END
        FROM fleet_registered r
        CROSS JOIN LATERAL fleet_json_texts(r.device_ids) AS d (device)
        WHERE r.store_id = s.store_id
    ),
    cdi (name, node) AS MATERIALIZED (
        SELECT c.name, c.host_path FROM fleet_cdi_device_nodes c WHERE c.store_id = s.store_id
    ),
    resp (alloc_id, kind, value) AS MATERIALIZED (
        SELECT CAST(jsonb_build_array(r.pod_uid, r.container, r.resource) AS text), r.kind,
               r.value
        FROM fleet_response_nodes r WHERE r.store_id = s.store_id
    ),
    dp (alloc_id, resource, device, base) AS MATERIALIZED (
        SELECT alloc_id, resource, device, CASE
            WHEN rtrim(device, '0123456789') LIKE '%_::'
                 AND rtrim(device, '0123456789') <> device
            THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
            ELSE device END FROM held_dp
        UNION ALL
        SELECT NULL, resource, device, base FROM reg r
        WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                          WHERE h.resource = r.resource AND h.device = r.device)
    ),
    dp_own (resource, device, node) AS MATERIALIZED (
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN cdi n ON n.name = h.resource || '=' || h.base
        UNION
        SELECT h.resource, h.device, n.node FROM dp h
        JOIN resp r ON r.alloc_id = h.alloc_id AND r.kind = 'cdi'
        JOIN cdi n ON n.name = r.value
        WHERE substr(r.value, strpos(r.value, '=') + 1) IN (h.base, h.device)
    ),
    dp_entry (alloc_id, node) AS MATERIALIZED (
        SELECT alloc_id, value FROM resp WHERE kind = 'host' AND value <> ''
        UNION
        SELECT r.alloc_id, n.node FROM resp r JOIN cdi n ON n.name = r.value
        WHERE r.kind = 'cdi'
    ),
    dp_nodes (resource, device, node) AS (
        SELECT resource, device, node FROM dp_own
        UNION
        SELECT h.resource, h.device, e.node FROM dp h
        JOIN dp_entry e ON e.alloc_id = h.alloc_id
        WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                          AND o.device = h.device)
    ),
    claims (claim, namespace, pods, driver, device, cdi) AS MATERIALIZED (
        SELECT i.item_key, i.value ->> 'namespace', i.value -> 'pods', d.key,
               (x.value ->> 'pool') || '/' || (x.value ->> 'device'), x.value -> 'cdi'
        FROM fleet_node_items i
        CROSS JOIN LATERAL fleet_json_entries(i.value -> 'drivers') AS d
        CROSS JOIN LATERAL fleet_json_items(d.value) AS x (value)
        WHERE i.store_id = s.store_id AND i.kind = 'dra'
    ),
    claim_pods (claim, driver, device, namespace, pod_uid) AS MATERIALIZED (
        SELECT c.claim, c.driver, c.device, c.namespace, p.pod_uid FROM claims c
        LEFT JOIN LATERAL fleet_json_texts(c.pods) AS p (pod_uid) ON true
    ),
    dra (resource, device, holders) AS MATERIALIZED (
        SELECT driver, device, count(*) FROM claim_pods GROUP BY driver, device
    ),
    claim_device_nodes (resource, device, node) AS (
        SELECT DISTINCT c.driver, c.device, n.node
        FROM claims c
        CROSS JOIN LATERAL fleet_json_texts(c.cdi) AS j (name)
        JOIN cdi n ON n.name = j.name
    ),
    replicas (resource, base, n) AS MATERIALIZED (
        SELECT resource, base, count(*) FROM reg WHERE device <> base GROUP BY resource, base
    ),
    devs (mechanism, resource, device, base, share) AS (
        SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
               CASE WHEN h.base = h.device THEN CAST(1 AS double precision)
                    ELSE CAST(1 AS double precision) / g.n END
        FROM dp h
        LEFT JOIN replicas g ON g.resource = h.resource AND g.base = h.base
        UNION ALL
        SELECT 'dra', resource, device, device, CAST(1 AS double precision) / holders FROM dra
    ),
    nodes (mechanism, resource, device, node) AS MATERIALIZED (
        SELECT 'device-plugin', resource, device, node FROM dp_nodes
        UNION ALL
        SELECT 'dra', resource, device, node FROM claim_device_nodes
    ),
    named (mechanism, resource, device, physical_id) AS MATERIALIZED (
        SELECT mechanism, resource, device,
               '[' || string_agg(CAST(to_json(node) AS text), ',' ORDER BY node COLLATE "C")
               || ']'
        FROM nodes GROUP BY mechanism, resource, device
    ),
    ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
        SELECT v.mechanism, v.resource, v.device, v.base,
               coalesce(n.physical_id, v.mechanism || ':' || v.resource || ':' || v.base),
               CASE WHEN n.physical_id IS NOT NULL THEN 1 ELSE 0 END, v.share
        FROM devs v
        LEFT JOIN named n
          ON n.mechanism = v.mechanism AND n.resource = v.resource AND n.device = v.device
    ),
    holders (mechanism, resource, device, pod_uid, container, namespace) AS (
        SELECT DISTINCT 'device-plugin', a.resource, a.device_id, a.pod_uid, a.container,
               CAST(NULL AS text)
        FROM fleet_allocations a WHERE a.store_id = s.store_id
        UNION ALL
        SELECT 'dra', driver, device, pod_uid, CAST(NULL AS text), namespace FROM claim_pods
    ),
    names (pod_uid, namespace, name) AS MATERIALIZED (
        SELECT n.pod_uid, n.value ->> 'namespace', n.value ->> 'name' FROM fleet_node_items n
        WHERE n.store_id = s.store_id AND n.kind = 'node' AND n.resource = 'pod-name'
    ),
    pids (pid, resolved) AS MATERIALIZED (SELECT DISTINCT physical_id, resolved FROM ident),
    pn (pid, node) AS MATERIALIZED (
        SELECT p.pid, j.node FROM pids p
        CROSS JOIN LATERAL fleet_json_texts(CAST(p.pid AS jsonb)) AS j (node)
        WHERE p.resolved = 1
        UNION ALL
        SELECT pid, pid FROM pids WHERE resolved = 0
    ),
    width (node, c) AS MATERIALIZED (SELECT node, count(*) FROM pn GROUP BY node),
    size (pid, n) AS MATERIALIZED (SELECT pid, count(*) FROM pn GROUP BY pid),
    rare (pid, node) AS MATERIALIZED (
        SELECT DISTINCT ON (pn.pid) pn.pid, pn.node FROM pn JOIN width w ON w.node = pn.node
        ORDER BY pn.pid, w.c
    ),
    candidates (part, whole) AS MATERIALIZED (
        SELECT r.pid, o.pid FROM rare r JOIN pn o ON o.node = r.node
    ),
    within (part, whole) AS MATERIALIZED (
        SELECT c.part, c.whole FROM candidates c
        JOIN size z ON z.pid = c.part
        JOIN pn a ON a.pid = c.part
        JOIN pn b ON b.pid = c.whole AND b.node = a.node
        GROUP BY c.part, c.whole, z.n
        HAVING count(*) = z.n
    ),
    rel (pid, other) AS MATERIALIZED (
        SELECT part, whole FROM within UNION SELECT whole, part FROM within
    ),
    held (pid, grp, mechanism, resource, device, pod_uid, container, namespace)
    AS MATERIALIZED (
        SELECT i.physical_id,
               CASE WHEN h.mechanism = 'dra' THEN 'dra|' || h.resource || '|' || h.device
                    WHEN i.base <> h.device THEN 'replica|' || h.resource || '|' || i.base END,
               h.mechanism, h.resource, h.device, h.pod_uid, h.container, h.namespace
        FROM holders h
        JOIN ident i ON i.mechanism = h.mechanism AND i.resource = h.resource
         AND i.device = h.device
        WHERE h.pod_uid IS NOT NULL
    ),
    pq (pid, pod_uid, grp, pods) AS MATERIALIZED (
        SELECT r.pid, x.pod_uid,
               CASE WHEN count(*) = count(x.grp) AND min(x.grp) = max(x.grp)
                    THEN min(x.grp) END,
               count(*) OVER (PARTITION BY r.pid)
        FROM rel r JOIN held x ON x.pid = r.other
        GROUP BY r.pid, x.pod_uid
    ),
    group_pods (pid, grp, pods) AS MATERIALIZED (
        SELECT pid, grp, count(*) FROM pq WHERE grp IS NOT NULL GROUP BY pid, grp
    ),
    found (physical_id, mechanism, resource, device, pod_uid, namespace, pod_name, container,
           pod_count) AS MATERIALIZED (
        SELECT h.pid, h.mechanism, h.resource, h.device, h.pod_uid,
               coalesce(n.namespace, h.namespace), n.name, h.container,
               q.pods - coalesce(g.pods, 0) + CASE WHEN q.grp = h.grp THEN 1 ELSE 0 END
        FROM held h
        JOIN pq q ON q.pid = h.pid AND q.pod_uid = h.pod_uid
        LEFT JOIN group_pods g ON g.pid = h.pid AND g.grp = h.grp
        LEFT JOIN names n ON n.pod_uid = h.pod_uid
    )
    SELECT physical_id, mechanism, resource, device, pod_uid, namespace, pod_name, container,
           pod_count
    FROM found WHERE pod_count > 1
) x
WHERE s.retired_at IS NULL
"""

FLEET_ALLOCATION_INTERVALS = """
CREATE VIEW v_fleet_allocation_intervals AS
WITH dp_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.pod_uid IS NOT NULL
      AND e.op IN ('insert', 'replace', 'import', 'backfill', 'delete')
    WINDOW w AS (PARTITION BY e.store_id, e.pod_uid, e.container, e.resource ORDER BY e.seq)
),
dp_held AS (
    SELECT DISTINCT e.store_id, e.pod_uid, e.container, e.resource, d.device,
           e.rn, e.seq, e.ts, e.next_ts
    FROM dp_events e
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(e.device_ids) = 'object'
                                       THEN e.device_ids ELSE '{}' END) n
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value) = 'array'
                                                      THEN n.value ELSE '[]' END) d(device)
    WHERE e.op <> 'delete'
),
claim_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.op IN ('dra-set', 'dra-delete')
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
                                       THEN e.device_ids -> 'drivers' ELSE '{}' END) r
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
)
SELECT s.node AS node, i.store_id AS store_id, i.mechanism AS mechanism,
       i.resource AS resource, i.device AS device,
       coalesce(d.physical_id, i.mechanism || ':' || i.resource || ':' || i.device)
           AS physical_id,
       CASE WHEN i.mechanism = 'dra' AND coalesce(i.ev_at, i.until_ts) IS NOT NULL
            THEN CAST(1 AS double precision)
            ELSE coalesce(d.share, CAST(1 AS double precision)) END AS share,
       i.pod_uid AS pod_uid,
       coalesce(pn.value ->> 'namespace',
                (SELECT n.device_ids ->> 'namespace' FROM fleet_events n
                 WHERE n.store_id = i.store_id AND n.pod_uid = i.pod_uid
                   AND n.container IS NULL AND n.resource = 'pod-name' AND n.op = 'node-set'
                 ORDER BY n.seq DESC LIMIT 1),
                i.claim_namespace) AS namespace,
       coalesce(pn.value ->> 'name',
                (SELECT n.device_ids ->> 'name' FROM fleet_events n
                 WHERE n.store_id = i.store_id AND n.pod_uid = i.pod_uid
                   AND n.container IS NULL AND n.resource = 'pod-name' AND n.op = 'node-set'
                 ORDER BY n.seq DESC LIMIT 1)) AS pod_name,
       i.container AS container, i.start AS start,
       coalesce(i.ev_at, i.until_ts) AS "end",
       CASE WHEN i.ev_at IS NOT NULL THEN i.ev_source
            WHEN i.until_ts IS NULL THEN NULL
            WHEN i.mechanism = 'dra' THEN 'dra'
            ELSE 'checkpoint' END AS end_source
FROM ended i
JOIN fleet_stores s ON s.store_id = i.store_id
LEFT JOIN fleet_node_items pn
  ON pn.store_id = i.store_id
 AND pn.item_key = CAST(jsonb_build_array(i.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
LEFT JOIN v_fleet_device_identity d
  ON d.store_id = i.store_id AND d.mechanism = i.mechanism AND d.resource = i.resource
 AND d.device = i.device
WHERE s.retired_at IS NULL
"""

_VIEWS = (
    ("v_fleet_device_identity", FLEET_DEVICE_IDENTITY),
    ("v_fleet_physical_devices", FLEET_PHYSICAL_DEVICES),
    ("v_fleet_physical_double_allocations", FLEET_PHYSICAL_DOUBLE_ALLOCATIONS),
)


def upgrade() -> None:
    op.create_table(
        "fleet_cdi_device_nodes",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("spec_path", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("host_path", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id", "spec_path", "name", "host_path", name="pk_fleet_cdi_device_nodes"
        ),
    )
    op.create_table(
        "fleet_response_nodes",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("container", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id",
            "pod_uid",
            "container",
            "resource",
            "kind",
            "value",
            name="pk_fleet_response_nodes",
        ),
        sa.CheckConstraint("kind IN ('host', 'cdi')", name="ck_fleet_response_nodes_kind"),
    )
    nodes = f0003._grantees("fleet_ship_open(uuid, text)")
    f0003._execute(f0003._render(SHIP_PHYSICAL, f0002._schema()))
    f0003._execute(f"REVOKE EXECUTE ON FUNCTION {SHIP_PHYSICAL_NAME} FROM PUBLIC")
    f0003._execute(f"ALTER FUNCTION {SHIP_PHYSICAL_NAME} SET lock_timeout = '1min'")
    for role in nodes:
        f0003._execute(f"GRANT EXECUTE ON FUNCTION {SHIP_PHYSICAL_NAME} TO {f0003._ident(role)}")

    for create in JSON_FUNCTIONS:
        f0003._execute(create)
    readers = f0003._readers("v_fleet_allocation_intervals")
    op.execute("DROP VIEW v_fleet_allocation_intervals")
    for _name, create in _VIEWS:
        op.execute(create)
    op.execute(FLEET_ALLOCATION_INTERVALS)
    relations = ", ".join([*_TABLES, *(n for n, _ in _VIEWS), "v_fleet_allocation_intervals"])
    for role in readers:
        op.execute(f"GRANT SELECT ON {relations} TO {f0003._ident(role)}")


def downgrade() -> None:
    readers = f0003._readers("v_fleet_allocation_intervals")
    op.execute("DROP VIEW v_fleet_allocation_intervals")
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    op.execute(f0007.V_FLEET_ALLOCATION_INTERVALS)
    for role in readers:
        op.execute(f"GRANT SELECT ON v_fleet_allocation_intervals TO {f0003._ident(role)}")
    f0003._execute(f"DROP FUNCTION {SHIP_PHYSICAL_NAME}")
    for name in JSON_FUNCTION_NAMES:
        f0003._execute(f"DROP FUNCTION {name}")
    for table in reversed(_TABLES):
        op.drop_table(table)
