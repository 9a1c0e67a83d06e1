"""Reads of the node's other managers for the command line and the API: the alignment views,
the ``topology`` summary, one pod's CPUs, memory and claims, names beside listings."""

from __future__ import annotations

from podstore.storage.sql import pods

_NUMA_COLUMNS = (
    "pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, aligned"
)
CONTAINER_NUMA = f"SELECT {_NUMA_COLUMNS} FROM v_container_numa ORDER BY pod_uid, container"
MISALIGNED = f"SELECT {_NUMA_COLUMNS} FROM v_numa_misaligned ORDER BY pod_uid, container"

# ---- podstore topology: per NUMA node (NULL: not known) ----------------------------------------

TOPOLOGY_CPUS = "SELECT numa_node, count(*) FROM numa_cpus GROUP BY numa_node"
TOPOLOGY_EXCLUSIVE = """
    SELECT a.numa_node, a.pod_uid, n.namespace, n.name, a.container,
           group_concat(a.cpu) AS cpus
    FROM (SELECT * FROM v_cpu_assignments ORDER BY cpu) a
    LEFT JOIN pod_names n ON n.pod_uid = a.pod_uid
    GROUP BY a.numa_node, a.pod_uid, a.container
    ORDER BY a.numa_node, a.pod_uid, a.container
"""
TOPOLOGY_SHARED = """
    SELECT numa_node, count(*) FROM v_shared_cpus GROUP BY numa_node ORDER BY numa_node
"""
TOPOLOGY_MEMORY = """
    SELECT numa_node, memory_type, allocatable, reserved, free FROM v_memory_numa
    ORDER BY numa_node, memory_type
"""
# A block spanning several NUMA nodes is listed on each of them, with its whole size.
TOPOLOGY_MEMORY_HOLDERS = """
    SELECT j.value AS numa_node, m.memory_type, m.pod_uid, n.namespace, n.name, m.container,
           sum(m.size_bytes)
    FROM v_memory_assignments m, json_each(m.numa_nodes) j
    LEFT JOIN pod_names n ON n.pod_uid = m.pod_uid
    GROUP BY j.value, m.memory_type, m.pod_uid, m.container
    ORDER BY 1, 2, 3, 6
"""
# The device IDs joined by U+001F (no device ID from a kubelet holds it; the reader splits).
TOPOLOGY_DEVICES = """
    SELECT CASE WHEN a.numa_node < 0 THEN NULL ELSE a.numa_node END, a.resource, a.pod_uid,
           n.namespace, n.name, a.container, group_concat(a.device_id, char(31))
    FROM v_allocations a
    LEFT JOIN pod_names n ON n.pod_uid = a.pod_uid
    GROUP BY 1, a.resource, a.pod_uid, a.container
    ORDER BY 1, 2, 3, 6
"""
# Registered devices nobody holds: the checkpoint does not say on which NUMA node they are.
TOPOLOGY_FREE_DEVICES = """
    SELECT r.resource, count(*)
    FROM registered_devices r
    WHERE NOT EXISTS (SELECT 1 FROM v_device_owners o
                      WHERE o.resource = r.resource AND o.device_id = r.device_id)
    GROUP BY r.resource ORDER BY r.resource
"""
TOPOLOGY_DRA = """
    SELECT d.driver, d.namespace, d.claim_name, count(DISTINCT d.pool || '/' || d.device)
    FROM v_dra_devices d
    GROUP BY d.driver, d.claim_uid
    ORDER BY d.driver, d.namespace, d.claim_name
"""

# ---- one pod (podstore get, PodStore.pod_cpus / pod_memory / pod_claims) ------------------------

POD_CPUS = """
    SELECT a.container, c.cpu
    FROM cpu_assignments a
    LEFT JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
    WHERE a.pod_uid = ?
    ORDER BY a.container, c.cpu
"""
POD_MEMORY = """
    SELECT a.id, a.container, b.position, b.memory_type, b.size_bytes, b.affinity_null,
           n.numa_node
    FROM memory_assignments a
    JOIN memory_blocks b ON b.assignment_id = a.id
    LEFT JOIN memory_block_numa n ON n.assignment_id = a.id AND n.position = b.position
    WHERE a.pod_uid = ?
    ORDER BY a.id, b.position, n.idx
"""
POD_CLAIM_UIDS = """
    SELECT c.claim_uid FROM dra_claim_pods p JOIN dra_claims c ON c.id = p.claim_id
    WHERE p.pod_uid = ?
    ORDER BY c.position
"""

# ---- DRA devices by name (podstore owners driver/pool/device) ---------------------------------

DRA_OWNERS = """
    SELECT DISTINCT d.pod_uid, d.namespace, d.claim_name, d.claim_uid, d.share_id
    FROM v_dra_devices d
    WHERE d.driver = :driver AND d.pool = :pool AND d.device = :device
    ORDER BY d.pod_uid, d.namespace, d.claim_name, d.claim_uid
"""

# ---- per pod, for listings ------------------------------------------------------------------

NODE_PODS = f"""
    SELECT x.pod_uid, sum(cpus), sum(mem), sum(claims), {pods.containers_of("x.pod_uid")}
    FROM (
        SELECT a.pod_uid AS pod_uid, count(c.cpu) AS cpus, 0 AS mem, 0 AS claims
        FROM cpu_assignments a
        LEFT JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
        WHERE a.pod_uid IS NOT NULL AND a.container IS NOT NULL
        GROUP BY a.pod_uid
        UNION ALL
        SELECT a.pod_uid, 0, coalesce(sum(b.size_bytes), 0), 0
        FROM memory_assignments a
        LEFT JOIN memory_blocks b ON b.assignment_id = a.id
        WHERE a.container IS NOT NULL
        GROUP BY a.pod_uid
        UNION ALL
        SELECT pod_uid, 0, 0, count(*) FROM dra_claim_pods GROUP BY pod_uid) x
    GROUP BY x.pod_uid
    ORDER BY x.pod_uid
"""
# Names of pods no longer named: the newest pod-name event of each (the history keeps them).
PAST_NAMES = """
    SELECT pod_uid, device_ids FROM allocation_events
    WHERE op = 'node-set' AND resource = 'pod-name' AND pod_uid IS NOT NULL
    ORDER BY seq
"""

# Who used a DRA device at an instant, from the history: each claim that ever named it up to
# the cut, its latest event up to the cut decides (a dra-set listing it, not a release).
DRA_CLAIMS_AT = """
    WITH cut (seq) AS (
        SELECT seq FROM allocation_events WHERE ts <= :when ORDER BY ts DESC, seq DESC LIMIT 1
    ),
    keys (resource) AS (
        SELECT DISTINCT e.resource
        FROM allocation_event_devices d
        JOIN allocation_events e ON e.seq = d.seq
        WHERE d.device_id = :device_id AND d.seq <= (SELECT seq FROM cut)
          AND e.op IN ('dra-set', 'dra-delete')
    ),
    latest (seq) AS (
        SELECT (SELECT max(e.seq) FROM allocation_events e
                WHERE e.pod_uid IS NULL AND e.container IS NULL AND e.resource = k.resource
                  AND e.seq <= (SELECT seq FROM cut))
        FROM keys k
    )
    SELECT e.resource, e.device_ids
    FROM latest l
    JOIN allocation_events e ON e.seq = l.seq
    WHERE e.op = 'dra-set'
      AND EXISTS (SELECT 1 FROM allocation_event_devices d
                  WHERE d.seq = e.seq AND d.device_id = :device_id AND d.released = 0)
    ORDER BY e.resource
"""

# ---- metrics (podstore/metrics/collector.py): (metric, numa_node, label, value) ------------------

NODE_GAUGES = """
    SELECT 'exclusive_cpus', numa_node, NULL, count(*) FROM v_cpu_assignments
    GROUP BY numa_node
    UNION ALL
    SELECT 'shared_cpus', numa_node, NULL, count(*) FROM v_shared_cpus GROUP BY numa_node
    UNION ALL
    SELECT 'memory_assigned_bytes', numa_node, memory_type, reserved FROM v_memory_numa
    UNION ALL
    SELECT 'dra_allocated_devices', NULL, driver, count(DISTINCT pool || '/' || device)
    FROM dra_devices GROUP BY driver
    UNION ALL
    SELECT 'numa_misaligned_containers', NULL, NULL, count(*) FROM v_numa_misaligned
    UNION ALL
    SELECT 'physical_double_allocations', NULL, NULL, count(DISTINCT physical_id)
    FROM v_physical_double_allocations
"""
