"""The SQL of the operator commands (``podstore pods``, ``devices``, ``owners``, completion).

They run through ``PodStore.query``, on the guarded read-only connection, over the views of
docs/sql.md and the tables.
"""

from __future__ import annotations

PODS = """
    SELECT p.uid,
           (SELECT count(*) FROM containers c WHERE c.pod_id = p.id),
           (SELECT count(*) FROM containers c JOIN allocations a ON a.container_id = c.id
            WHERE c.pod_id = p.id),
           (SELECT count(*) FROM (
                SELECT DISTINCT a.resource, d.device_id
                FROM containers c
                JOIN allocations a ON a.container_id = c.id
                JOIN allocation_devices d ON d.allocation_id = a.id
                WHERE c.pod_id = p.id))
    FROM pods p
    ORDER BY p.uid
"""
POD_RESOURCES = """
    SELECT DISTINCT p.uid, a.resource
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    ORDER BY p.uid, a.resource
"""
# Every held device once per holder (with its NUMA ids and whether it is registered), then
# every registered device nobody holds.
DEVICES = """
    SELECT o.resource, o.device_id,
           (SELECT group_concat(DISTINCT v.numa_node) FROM v_allocations v
            WHERE v.resource = o.resource AND v.device_id = o.device_id
              AND v.pod_uid = o.pod_uid AND v.container = o.container),
           EXISTS (SELECT 1 FROM registered_devices r
                   WHERE r.resource = o.resource AND r.device_id = o.device_id),
           o.pod_uid, o.container
    FROM v_device_owners o
    WHERE :resource IS NULL OR o.resource = :resource
    UNION ALL
    SELECT DISTINCT r.resource, r.device_id, NULL, 1, NULL, NULL
    FROM registered_devices r
    WHERE (:resource IS NULL OR r.resource = :resource)
      AND NOT EXISTS (SELECT 1 FROM v_device_owners o
                      WHERE o.resource = r.resource AND o.device_id = r.device_id)
    ORDER BY 1, 2, 5, 6
"""
OWNERS_NOW = """
    SELECT pod_uid, container, resource FROM v_device_owners WHERE device_id = :device
    ORDER BY 1, 2, 3
"""
CONTAINERS_OF_POD = """
    SELECT DISTINCT container FROM v_allocations WHERE pod_uid = ? ORDER BY 1
"""
