"""Reads of the node's other managers for the command line and the API: the alignment views,
the ``topology`` summary, one pod's CPUs, memory and claims, names beside listings."""

from __future__ import annotations

_NUMA_COLUMNS = (
    "pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, aligned"
)
CONTAINER_NUMA = f"SELECT {_NUMA_COLUMNS} FROM v_container_numa ORDER BY pod_uid, container"
MISALIGNED = f"SELECT {_NUMA_COLUMNS} FROM v_numa_misaligned ORDER BY pod_uid, container"

# ---- podstore topology: per NUMA node (NULL: not known) ----------------------------------------

TOPOLOGY_NODES = "SELECT DISTINCT numa_node FROM numa_cpus ORDER BY numa_node"
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
TOPOLOGY_DEVICES = """
    SELECT CASE WHEN a.numa_node < 0 THEN NULL ELSE a.numa_node END, a.resource, a.pod_uid,
           n.namespace, n.name, a.container, count(DISTINCT a.device_id)
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

# ---- one pod (podstore get) ---------------------------------------------------------------

POD_CPUS = """
    SELECT container, numa_node, group_concat(cpu) FROM (
        SELECT container, numa_node, cpu FROM v_cpu_assignments WHERE pod_uid = ?
        UNION ALL
        SELECT NULL, numa_node, cpu FROM v_pod_cpus WHERE pod_uid = ?
        ORDER BY 1, 2, 3)
    GROUP BY container, numa_node
    ORDER BY container, numa_node
"""
POD_MEMORY = """
    SELECT container, memory_type, size_bytes, numa_nodes FROM (
        SELECT container, memory_type, size_bytes, numa_nodes
        FROM v_memory_assignments WHERE pod_uid = ?
        UNION ALL
        SELECT NULL, memory_type, size_bytes, numa_nodes FROM v_pod_memory WHERE pod_uid = ?)
    ORDER BY container, memory_type
"""
POD_CLAIMS = """
    SELECT DISTINCT d.claim_uid, d.namespace, d.claim_name, d.driver, d.pool, d.device
    FROM v_dra_devices d WHERE d.pod_uid = ?
    ORDER BY d.namespace, d.claim_name, d.driver, d.pool, d.device
"""
HAS_NODE_STATE = """
    SELECT EXISTS (SELECT 1 FROM cpu_assignments WHERE pod_uid = :pod)
        OR EXISTS (SELECT 1 FROM memory_assignments WHERE pod_uid = :pod)
        OR EXISTS (SELECT 1 FROM dra_claim_pods WHERE pod_uid = :pod)
"""
POD_NAME = "SELECT namespace, name FROM pod_names WHERE pod_uid = ?"

# ---- DRA devices by name (podstore owners driver/pool/device) ---------------------------------

DRA_OWNERS = """
    SELECT DISTINCT d.pod_uid, d.namespace, d.claim_name, d.claim_uid
    FROM v_dra_devices d
    WHERE d.driver = :driver AND d.pool = :pool AND d.device = :device
    ORDER BY d.pod_uid, d.namespace, d.claim_name
"""
