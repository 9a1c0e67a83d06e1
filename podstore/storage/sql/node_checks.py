"""``podstore verify``'s rules of the node's other managers (storage/selfcheck.py): each
query names the rows that break one."""

from __future__ import annotations

# An exclusive CPU held by containers of two pods (containers of one pod may share: kubelet
# gives an init container's CPUs to the app containers after it, as it does with devices).
CPU_TWO_PODS = """
    SELECT c.cpu, count(DISTINCT a.pod_uid),
           group_concat(coalesce(a.pod_uid, '-') || '/' || a.container, ' ')
    FROM cpu_assignment_cpus c
    JOIN cpu_assignments a ON a.id = c.assignment_id
    WHERE a.container IS NOT NULL AND a.pod_uid IS NOT NULL
    GROUP BY c.cpu
    HAVING count(DISTINCT a.pod_uid) > 1
    ORDER BY c.cpu
"""
# An exclusive CPU (a container's or a pod's own) that is also in the shared pool.
CPU_ALSO_SHARED = """
    SELECT DISTINCT c.cpu, coalesce(a.pod_uid, '-'), coalesce(a.container, '')
    FROM cpu_assignment_cpus c
    JOIN cpu_assignments a ON a.id = c.assignment_id
    JOIN cpu_shared s ON s.cpu = c.cpu
    ORDER BY 1, 2, 3
"""
MEMORY_OVER_ALLOCATABLE = """
    SELECT numa_node, memory_type, reserved, allocatable FROM memory_numa_tables
    WHERE NOT table_null AND reserved > allocatable
    ORDER BY numa_node, memory_type
"""
# A device in two claims where a claim holds it without a share id (consumable capacity
# shares a device between claims, each share with its own id).
DRA_TWO_CLAIMS = """
    SELECT d.driver, d.pool, d.device, count(DISTINCT d.claim_id)
    FROM dra_devices d
    GROUP BY d.driver, d.pool, d.device
    HAVING count(DISTINCT d.claim_id) > 1 AND count(d.share_id) < count(*)
    ORDER BY 1, 2, 3
"""
# Rows no podstore write leaves: a block's NUMA node without its block, a device without its
# driver's row.
ORPHAN_BLOCK_NUMA = """
    SELECT n.assignment_id, n.position, n.idx FROM memory_block_numa n
    WHERE NOT EXISTS (SELECT 1 FROM memory_blocks b
                      WHERE b.assignment_id = n.assignment_id AND b.position = n.position)
    ORDER BY 1, 2, 3
"""
ORPHAN_DRA_DEVICES = """
    SELECT d.claim_id, d.driver, d.position FROM dra_devices d
    WHERE NOT EXISTS (SELECT 1 FROM dra_claim_drivers r
                      WHERE r.claim_id = d.claim_id AND r.driver = d.driver)
    ORDER BY 1, 2, 3
"""
