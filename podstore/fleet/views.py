"""The central views, the fleet's stable SQL contract (docs/fleet.md): each a node view
(docs/sql.md) with ``node`` and ``store_id`` in front, its rule applied store by store, joined
on ``store_id`` only, retired stores left out.

Revisions f0002 to f0004 and f0007 keep frozen copies of this text: a change here needs a new
revision (a test checks that a database at head holds exactly these definitions).
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

# Allocation intervals (docs/sql.md, "v_allocation_intervals"): the node view's rule over the
# shipped events, store by store (revision f0007). Without ``start_cut``: the fleet keeps what
# the nodes pruned. The identity columns are the node's unresolved form, as on the node.
V_FLEET_ALLOCATION_INTERVALS = """
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
       i.mechanism || ':' || i.resource || ':' || i.device AS physical_id, 1.0 AS share,
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
    ("v_fleet_allocation_intervals", V_FLEET_ALLOCATION_INTERVALS),
)
