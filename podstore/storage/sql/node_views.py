"""The SQL views of the node's other managers, its topology and pod names (revision 0007):
the public contract of docs/sql.md, "The whole node".

Revision 0007 keeps a frozen copy of this text (a test holds a store at head to it). The views
read the device tables only through ``v_allocations``, so a new layout leaves them be. NUMA
sets are JSON arrays of distinct ascending ids (``[0,1]``): equal sets, equal texts.
"""

from __future__ import annotations

V_POD_NAMES = """
CREATE VIEW v_pod_names AS
SELECT pod_uid, namespace, name FROM pod_names
"""

# Exclusive CPUs of containers (and of CPU v1 entries, keyed by container id: pod_uid NULL);
# a pod's own cpuset (podEntries) is v_pod_cpus.
V_CPU_ASSIGNMENTS = """
CREATE VIEW v_cpu_assignments AS
SELECT a.pod_uid AS pod_uid, a.container AS container, c.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_assignments a
JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
LEFT JOIN numa_cpus t ON t.cpu = c.cpu
WHERE a.container IS NOT NULL
"""

V_POD_CPUS = """
CREATE VIEW v_pod_cpus AS
SELECT a.pod_uid AS pod_uid, c.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_assignments a
JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
LEFT JOIN numa_cpus t ON t.cpu = c.cpu
WHERE a.container IS NULL
"""

V_SHARED_CPUS = """
CREATE VIEW v_shared_cpus AS
SELECT s.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_shared s
LEFT JOIN numa_cpus t ON t.cpu = s.cpu
"""

# One block's NUMA nodes, distinct and ascending (NULL for a nil list).
_BLOCK_NUMA = """CASE WHEN b.affinity_null THEN NULL ELSE (
           SELECT json_group_array(x.numa_node) FROM (
               SELECT DISTINCT n.numa_node FROM memory_block_numa n
               WHERE n.assignment_id = b.assignment_id AND n.position = b.position
               ORDER BY n.numa_node) x) END"""

V_MEMORY_ASSIGNMENTS = f"""
CREATE VIEW v_memory_assignments AS
SELECT a.pod_uid AS pod_uid, a.container AS container, b.memory_type AS memory_type,
       b.size_bytes AS size_bytes,
       {_BLOCK_NUMA} AS numa_nodes
FROM memory_assignments a
JOIN memory_blocks b ON b.assignment_id = a.id
WHERE a.container IS NOT NULL
"""

V_POD_MEMORY = f"""
CREATE VIEW v_pod_memory AS
SELECT a.pod_uid AS pod_uid, b.memory_type AS memory_type, b.size_bytes AS size_bytes,
       {_BLOCK_NUMA} AS numa_nodes
FROM memory_assignments a
JOIN memory_blocks b ON b.assignment_id = a.id
WHERE a.container IS NULL
"""

V_MEMORY_NUMA = """
CREATE VIEW v_memory_numa AS
SELECT t.numa_node AS numa_node, t.memory_type AS memory_type, t.total AS total,
       t.system_reserved AS system_reserved, t.allocatable AS allocatable,
       t.reserved AS reserved, t.free AS free
FROM memory_numa_tables t
JOIN memory_numa_nodes n ON n.numa_node = t.numa_node
WHERE NOT t.table_null AND NOT n.state_null AND NOT n.memory_map_null
"""

V_DRA_DEVICES = """
CREATE VIEW v_dra_devices AS
SELECT c.claim_uid AS claim_uid, c.namespace AS namespace, c.claim_name AS claim_name,
       p.pod_uid AS pod_uid, d.driver AS driver, d.pool AS pool, d.device AS device,
       d.share_id AS share_id, d.request_names AS request_names,
       d.cdi_device_ids AS cdi_device_ids
FROM dra_claims c
JOIN dra_devices d ON d.claim_id = c.id
LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
"""

# Per container, the NUMA nodes of its devices (device plugins; -1 is no information), of its
# exclusive CPUs (through the topology) and of its memory blocks.
V_CONTAINER_NUMA = """
CREATE VIEW v_container_numa AS
WITH
dev (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT pod_uid, container, numa_node FROM v_allocations
        WHERE numa_node >= 0
        ORDER BY pod_uid, container, numa_node)
    GROUP BY pod_uid, container
),
cpu (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT a.pod_uid AS pod_uid, a.container AS container, t.numa_node AS numa_node
        FROM cpu_assignments a
        JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
        JOIN numa_cpus t ON t.cpu = c.cpu
        WHERE a.pod_uid IS NOT NULL AND a.container IS NOT NULL
        ORDER BY 1, 2, 3)
    GROUP BY pod_uid, container
),
mem (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT a.pod_uid AS pod_uid, a.container AS container, n.numa_node AS numa_node
        FROM memory_assignments a
        JOIN memory_blocks b ON b.assignment_id = a.id
        JOIN memory_block_numa n ON n.assignment_id = b.assignment_id AND n.position = b.position
        WHERE a.container IS NOT NULL AND NOT b.affinity_null
        ORDER BY 1, 2, 3)
    GROUP BY pod_uid, container
),
keys (pod_uid, container) AS (
    SELECT pod_uid, container FROM v_allocations
    UNION
    SELECT pod_uid, container FROM cpu_assignments
    WHERE pod_uid IS NOT NULL AND container IS NOT NULL
    UNION
    SELECT pod_uid, container FROM memory_assignments WHERE container IS NOT NULL
),
sets (pod_uid, container, device_numa, cpu_numa, memory_numa) AS (
    SELECT k.pod_uid, k.container, d.nodes, c.nodes, m.nodes
    FROM keys k
    LEFT JOIN dev d ON d.pod_uid = k.pod_uid AND d.container = k.container
    LEFT JOIN cpu c ON c.pod_uid = k.pod_uid AND c.container = k.container
    LEFT JOIN mem m ON m.pod_uid = k.pod_uid AND m.container = k.container
)
SELECT s.pod_uid AS pod_uid, n.namespace AS namespace, n.name AS pod_name,
       s.container AS container, s.device_numa AS device_numa, s.cpu_numa AS cpu_numa,
       s.memory_numa AS memory_numa,
       CASE
           WHEN (s.device_numa IS NOT NULL) + (s.cpu_numa IS NOT NULL)
                + (s.memory_numa IS NOT NULL) < 2 THEN NULL
           WHEN coalesce(s.device_numa, s.cpu_numa, s.memory_numa)
                    = coalesce(s.cpu_numa, s.memory_numa, s.device_numa)
                AND coalesce(s.memory_numa, s.device_numa, s.cpu_numa)
                    = coalesce(s.device_numa, s.cpu_numa, s.memory_numa) THEN 1
           ELSE 0
       END AS aligned
FROM sets s
LEFT JOIN pod_names n ON n.pod_uid = s.pod_uid
"""

V_NUMA_MISALIGNED = """
CREATE VIEW v_numa_misaligned AS
SELECT pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, aligned
FROM v_container_numa
WHERE aligned = 0
"""

#: (name, CREATE statement) in creation order (a view after those it reads); drop in reverse.
NODE_VIEWS: tuple[tuple[str, str], ...] = (
    ("v_pod_names", V_POD_NAMES),
    ("v_cpu_assignments", V_CPU_ASSIGNMENTS),
    ("v_pod_cpus", V_POD_CPUS),
    ("v_shared_cpus", V_SHARED_CPUS),
    ("v_memory_assignments", V_MEMORY_ASSIGNMENTS),
    ("v_pod_memory", V_POD_MEMORY),
    ("v_memory_numa", V_MEMORY_NUMA),
    ("v_dra_devices", V_DRA_DEVICES),
    ("v_container_numa", V_CONTAINER_NUMA),
    ("v_numa_misaligned", V_NUMA_MISALIGNED),
)
