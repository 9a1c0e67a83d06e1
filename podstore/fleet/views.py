"""The central views, the fleet's stable SQL contract (docs/fleet.md): each a node view
(docs/sql.md) with ``node`` and ``store_id`` in front, its rule applied store by store, joined
on ``store_id`` only, retired stores left out.

Revisions f0002 to f0004 and f0007 to f0009 keep frozen copies of this text: a change here
needs a new revision (a test checks that a database at head holds exactly these definitions).
"""

from __future__ import annotations

V_FLEET_ALLOCATIONS = """
CREATE VIEW v_fleet_allocations AS
SELECT s.node AS node, a.store_id AS store_id, a.pod_uid AS pod_uid,
       a.container AS container, a.resource AS resource, a.numa_node AS numa_node,
       a.device_id AS device_id
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
WHERE s.retired_at IS NULL
"""

# With the pod's name as the node's pod-name item holds it (NULL when the node has none).
V_FLEET_DEVICE_OWNERS = """
CREATE VIEW v_fleet_device_owners AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       n.value ->> 'namespace' AS namespace, n.value ->> 'name' AS pod_name
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
LEFT JOIN fleet_node_items n
  ON n.store_id = a.store_id
 AND n.item_key = CAST(jsonb_build_array(a.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
"""

# As on the node, only a device held from more than one pod of a store is double allocated;
# shipping keeps which in fleet_double_allocated, so this view never groups all allocations.
V_FLEET_DOUBLE_ALLOCATIONS = """
CREATE VIEW v_fleet_double_allocations AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       d.pod_count AS pod_count
FROM fleet_double_allocated d
JOIN fleet_allocations a
  ON a.store_id = d.store_id AND a.resource = d.resource AND a.device_id = d.device_id
JOIN fleet_stores s ON s.store_id = d.store_id
WHERE s.retired_at IS NULL
"""

# The node's other items (revision f0003, ``fleet_node_items``) read as the node's views read
# its tables (docs/sql.md, "The whole node"): JSON payloads as the node's events carry them.
V_FLEET_POD_NAMES = """
CREATE VIEW v_fleet_pod_names AS
SELECT s.node AS node, i.store_id AS store_id, i.pod_uid AS pod_uid,
       i.value ->> 'namespace' AS namespace, i.value ->> 'name' AS name
FROM fleet_node_items i
JOIN fleet_stores s ON s.store_id = i.store_id
WHERE i.kind = 'node' AND i.resource = 'pod-name' AND s.retired_at IS NULL
"""

# One row per device of a claim and pod using it (pod_uid NULL: a claim no pod lists);
# request_names and cdi_device_ids as JSON lists (NULL: null on the node).
V_FLEET_DRA_DEVICES = """
CREATE VIEW v_fleet_dra_devices AS
SELECT s.node AS node, i.store_id AS store_id, substr(i.resource, 5) AS claim_uid,
       i.value ->> 'namespace' AS namespace, i.value ->> 'name' AS claim_name,
       p.pod_uid AS pod_uid, d.key AS driver, x.value ->> 'pool' AS pool,
       x.value ->> 'device' AS device, x.value ->> 'shareID' AS share_id,
       nullif(x.value -> 'requests', CAST('null' AS jsonb)) AS request_names,
       nullif(x.value -> 'cdi', CAST('null' AS jsonb)) AS cdi_device_ids
FROM fleet_node_items i
JOIN fleet_stores s ON s.store_id = i.store_id
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(i.value -> 'drivers') = 'object' THEN i.value -> 'drivers' END) AS d
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(d.value) = 'array' THEN d.value END) AS x
LEFT JOIN LATERAL jsonb_array_elements_text(
    CASE WHEN jsonb_typeof(i.value -> 'pods') = 'array' THEN i.value -> 'pods' END)
    AS p (pod_uid) ON true
WHERE i.kind = 'dra' AND s.retired_at IS NULL
"""

# The node's v_container_numa rule, store by store (NUMA sets as ascending jsonb arrays, so
# equal sets are equal arrays). A LATERAL subquery per store (f0004): a query for one node reads
# its rows through the store_id indexes (tens of ms on a 10,000-store fleet), where grouping
# the whole fleet first took seconds whatever the filter.
V_FLEET_CONTAINER_NUMA = """
CREATE VIEW v_fleet_container_numa AS
SELECT s.node AS node, s.store_id AS store_id, x.pod_uid AS pod_uid,
       n.value ->> 'namespace' AS namespace, n.value ->> 'name' AS pod_name,
       x.container AS container, x.device_numa AS device_numa, x.cpu_numa AS cpu_numa,
       x.memory_numa AS memory_numa,
       CASE
           WHEN CAST(x.device_numa IS NOT NULL AS integer)
                + CAST(x.cpu_numa IS NOT NULL AS integer)
                + CAST(x.memory_numa IS NOT NULL AS integer) < 2 THEN NULL
           WHEN coalesce(x.device_numa, x.cpu_numa, x.memory_numa)
                    = coalesce(x.cpu_numa, x.memory_numa, x.device_numa)
                AND coalesce(x.memory_numa, x.device_numa, x.cpu_numa)
                    = coalesce(x.device_numa, x.cpu_numa, x.memory_numa) THEN 1
           ELSE 0
       END AS aligned
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH
    topo (cpu, numa_node) AS (
        SELECT CAST(c.cpu AS bigint), CAST(substr(t.resource, 6) AS bigint)
        FROM fleet_node_items t
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(t.value) = 'array' THEN t.value END) AS c (cpu)
        WHERE t.store_id = s.store_id AND t.kind = 'node' AND t.resource LIKE 'numa:%'
    ),
    dev (pod_uid, container, nodes) AS (
        SELECT a.pod_uid, a.container, jsonb_agg(DISTINCT a.numa_node ORDER BY a.numa_node)
        FROM fleet_allocations a
        WHERE a.store_id = s.store_id AND a.numa_node >= 0
        GROUP BY a.pod_uid, a.container
    ),
    cpu (pod_uid, container, nodes) AS (
        SELECT i.pod_uid, i.container, jsonb_agg(DISTINCT t.numa_node ORDER BY t.numa_node)
        FROM fleet_node_items i
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS c (cpu)
        JOIN topo t ON t.cpu = CAST(c.cpu AS bigint)
        WHERE i.store_id = s.store_id AND i.kind = 'cpu' AND i.resource = 'cpu'
          AND i.pod_uid IS NOT NULL AND i.container IS NOT NULL
        GROUP BY i.pod_uid, i.container
    ),
    mem (pod_uid, container, nodes) AS (
        SELECT i.pod_uid, i.container,
               jsonb_agg(DISTINCT CAST(n.numa_node AS bigint) ORDER BY CAST(n.numa_node AS bigint))
        FROM fleet_node_items i
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS b
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(b.value -> 'numaAffinity') = 'array'
                 THEN b.value -> 'numaAffinity' END) AS n (numa_node)
        WHERE i.store_id = s.store_id AND i.kind = 'memory' AND i.resource = 'memory'
          AND i.container IS NOT NULL
        GROUP BY i.pod_uid, i.container
    ),
    keys (pod_uid, container) AS (
        SELECT pod_uid, container FROM fleet_allocations WHERE store_id = s.store_id
        UNION
        SELECT pod_uid, container FROM fleet_node_items
        WHERE store_id = s.store_id AND kind = 'cpu' AND resource = 'cpu'
          AND pod_uid IS NOT NULL AND container IS NOT NULL
        UNION
        SELECT pod_uid, container FROM fleet_node_items
        WHERE store_id = s.store_id AND kind = 'memory' AND resource = 'memory'
          AND container IS NOT NULL
    )
    SELECT k.pod_uid, k.container, d.nodes AS device_numa, c.nodes AS cpu_numa,
           m.nodes AS memory_numa
    FROM keys k
    LEFT JOIN dev d ON d.pod_uid = k.pod_uid AND d.container = k.container
    LEFT JOIN cpu c ON c.pod_uid = k.pod_uid AND c.container = k.container
    LEFT JOIN mem m ON m.pod_uid = k.pod_uid AND m.container = k.container
) x
LEFT JOIN fleet_node_items n
  ON n.store_id = s.store_id
 AND n.item_key = CAST(jsonb_build_array(x.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
"""

V_FLEET_NUMA_MISALIGNED = """
CREATE VIEW v_fleet_numa_misaligned AS
SELECT node, store_id, pod_uid, namespace, pod_name, container, device_numa, cpu_numa,
       memory_numa, aligned
FROM v_fleet_container_numa
WHERE aligned = 0
"""

# Physical devices (docs/sql.md, "Physical devices"; revision f0008): the node views' rules
# (storage/sql/physical_views.py), store by store in a LATERAL subquery as the NUMA view does,
# over the fleet's state of the store: its allocations and registered devices, its DRA claims
# (fleet_node_items), and the node facts the shipper sends beside the events
# (fleet_cdi_device_nodes, fleet_response_nodes). Byte order (COLLATE "C") wherever the node
# sorts or compares text, as SQLite does; the physical id is the node's JSON text, compact.
# Where the node's SQL asks a correlated subquery (SQLite indexes a materialized CTE for it,
# PostgreSQL does not and would scan it per row), the same sets come from grouped joins. JSON
# lists are unpacked by f0008's fleet_json_* functions, which tell the planner a list holds a
# couple of items: jsonb_array_elements counts 100, and the estimates multiplied through the
# CTEs made it build hash tables in thousands of batches (seconds per read of one node).
_BASE = """CASE
            WHEN rtrim({d}, '0123456789') LIKE '%_::'
                 AND rtrim({d}, '0123456789') <> {d}
            THEN substr({d}, 1, length(rtrim({d}, '0123456789')) - 2)
            ELSE {d} END"""

_IDENTITY_CTES = f"""
    held_dp (alloc_id, resource, device) AS MATERIALIZED (
        SELECT DISTINCT CAST(jsonb_build_array(a.pod_uid, a.container, a.resource) AS text),
               a.resource, a.device_id
        FROM fleet_allocations a WHERE a.store_id = s.store_id
    ),
    reg (resource, device, base) AS MATERIALIZED (
        SELECT r.resource, d.device, {_BASE.format(d="d.device")}
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
        SELECT alloc_id, resource, device, {_BASE.format(d="device")} FROM held_dp
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
    )"""

# Every holder now: device plugins per (pod, container); DRA per (claim, pod), no container.
_HOLDERS = """
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
    )"""

_RELATED = """
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
    )"""

V_FLEET_DEVICE_IDENTITY = f"""
CREATE VIEW v_fleet_device_identity AS
SELECT s.node AS node, s.store_id AS store_id, x.mechanism AS mechanism,
       x.resource AS resource, x.device AS device, x.physical_id AS physical_id,
       x.resolved AS resolved, x.share AS share
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH
{_IDENTITY_CTES}
    SELECT mechanism, resource, device, physical_id, resolved, share FROM ident
) x
WHERE s.retired_at IS NULL
"""

V_FLEET_PHYSICAL_DEVICES = f"""
CREATE VIEW v_fleet_physical_devices AS
SELECT s.node AS node, s.store_id AS store_id, x.physical_id AS physical_id,
       x.resolved AS resolved, x.mechanism AS mechanism, x.resource AS resource,
       x.device AS device, x.pod_uid AS pod_uid, x.namespace AS namespace,
       x.pod_name AS pod_name, x.container AS container, x.share AS share
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH
{_IDENTITY_CTES},{_HOLDERS}
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

# A holder's pod_count as on the node: the pods holding its card (or a part or the whole of
# it), less those whose every such holding shares it with the holder as declared.
V_FLEET_PHYSICAL_DOUBLE_ALLOCATIONS = f"""
CREATE VIEW v_fleet_physical_double_allocations AS
SELECT s.node AS node, s.store_id AS store_id, x.physical_id AS physical_id,
       x.mechanism AS mechanism, x.resource AS resource, x.device AS device,
       x.pod_uid AS pod_uid, x.namespace AS namespace, x.pod_name AS pod_name,
       x.container AS container, x.pod_count AS pod_count
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH
{_IDENTITY_CTES},{_HOLDERS},{_RELATED},
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


# Allocation intervals (docs/sql.md, "v_allocation_intervals"): the node view's rule over the
# shipped events, store by store (revision f0007). Without ``start_cut``: the fleet keeps what
# the nodes pruned. The physical id comes from v_fleet_device_identity as the node's comes
# from v_device_identity (revision f0008): a device it does not know is its own. A holding's
# share is fixed when it starts (revision f0009): 1 over the count of the other replicas of
# its base in the registration in force then (the resource's latest registration event at or
# before the start, through the events' key index: a registration has no pod or container; ts
# never goes back along seq on a node, and one sync's events share their ts); none in force
# (none yet, or unregistered): the registered devices now, as v_fleet_device_identity counts
# them; unknown: whole. A device that is its own base, and every DRA holding, open or
# finished: whole. fleet_intervals keeps these rows, caught up when read. A claim event has no
# pod and no container (the node keys a claim by its uid alone): said, so that a claim's events
# are found through the events' key index.
_SHARE_CTES = f"""
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

# ``shared`` (each row of ``ended`` with its share) is materialized and joined on plain
# columns: planned with the other joins, the shares' join pushed the identity's into a merge on
# store_id alone (484,000,000 pairs filtered for one node).
V_FLEET_ALLOCATION_INTERVALS = f"""
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
                                       THEN e.device_ids ELSE '{{}}' END) n
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value) = 'array'
                                                      THEN n.value ELSE '[]' END) d(device)
    WHERE e.op <> 'delete'
),
claim_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.op IN ('dra-set', 'dra-delete') AND e.pod_uid IS NULL AND e.container IS NULL
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
),{_SHARE_CTES},
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
       i.share AS share,
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

#: (name, CREATE statement) in creation order; drop in reverse.
VIEWS: tuple[tuple[str, str], ...] = (
    ("v_fleet_allocations", V_FLEET_ALLOCATIONS),
    ("v_fleet_device_owners", V_FLEET_DEVICE_OWNERS),
    ("v_fleet_double_allocations", V_FLEET_DOUBLE_ALLOCATIONS),
    ("v_fleet_pod_names", V_FLEET_POD_NAMES),
    ("v_fleet_dra_devices", V_FLEET_DRA_DEVICES),
    ("v_fleet_container_numa", V_FLEET_CONTAINER_NUMA),
    ("v_fleet_numa_misaligned", V_FLEET_NUMA_MISALIGNED),
    ("v_fleet_device_identity", V_FLEET_DEVICE_IDENTITY),
    ("v_fleet_physical_devices", V_FLEET_PHYSICAL_DEVICES),
    ("v_fleet_physical_double_allocations", V_FLEET_PHYSICAL_DOUBLE_ALLOCATIONS),
    ("v_fleet_allocation_intervals", V_FLEET_ALLOCATION_INTERVALS),
)
