"""The SQL of the operator commands (``podstore pods``, ``devices``, ``owners``, completion).

They run on the guarded read-only connection (``PodStore.reader``) and stream: each is one
pass whose joins are index look-ups, with no full scan inside a correlated sub-query, so its
cost grows as n log n with the store (tests/test_cli_scale.py checks the query plans).
"""

from __future__ import annotations

# One row per pod in uid order, one pass: the uq_pods_uid index gives the order (the GROUP BY
# needs no sort), the joins are unique-index look-ups, and each DISTINCT holds one pod's rows.
# Resources and device keys are hex, so any name, commas included, stays intact.
PODS = """
    SELECT p.uid,
           count(DISTINCT c.id),
           count(DISTINCT a.id),
           count(DISTINCT CASE WHEN d.device_id IS NOT NULL
                               THEN hex(a.resource) || ',' || hex(d.device_id) END),
           group_concat(DISTINCT hex(a.resource))
    FROM pods p
    LEFT JOIN containers c ON c.pod_id = p.id
    LEFT JOIN allocations a ON a.container_id = c.id
    LEFT JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
    GROUP BY p.uid
    ORDER BY p.uid
"""

# ``podstore devices``, resource by resource (in byte order): the resources held or registered,
# then for each the held device rows in device_id order and the registered devices nobody
# holds; the caller merges the two by device id and groups a device's rows by holder.
#
# HELD_DEVICES walks the device_id index, so its rows stream with no sort. "Registered" is an
# IN that SQLite answers from one temporary index of the resource's registered devices (a
# probe per row of the (resource, position) key was round 1's quadratic query).
DEVICE_RESOURCES = """
    SELECT resource FROM (SELECT DISTINCT resource FROM allocations
                          WHERE :resource IS NULL OR resource = :resource)
    UNION
    SELECT resource FROM registered_resources WHERE :resource IS NULL OR resource = :resource
    ORDER BY 1
"""
HELD_DEVICES = """
    SELECT d.device_id, d.numa_node, p.uid, c.name,
           d.device_id IN (SELECT device_id FROM registered_devices WHERE resource = :resource)
    FROM allocation_device_spans d
    JOIN allocations a ON a.id = d.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    WHERE a.resource = :resource AND d.until_seq IS NULL
    ORDER BY d.device_id
"""
FREE_REGISTERED = """
    SELECT DISTINCT r.device_id
    FROM registered_devices r
    WHERE r.resource = :resource
      AND NOT EXISTS (SELECT 1 FROM allocation_device_spans d
                      JOIN allocations a ON a.id = d.allocation_id
                      WHERE d.device_id = r.device_id AND d.until_seq IS NULL
                        AND a.resource = r.resource)
    ORDER BY 1
"""

# The holders of one device (any resource): a probe of the device_id index.
OWNERS_NOW = """
    SELECT DISTINCT p.uid, c.name, a.resource
    FROM allocation_device_spans d
    JOIN allocations a ON a.id = d.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    WHERE d.device_id = :device AND d.until_seq IS NULL
    ORDER BY 1, 2, 3
"""
CONTAINERS_OF_POD = """
    SELECT c.name FROM pods p JOIN containers c ON c.pod_id = p.id WHERE p.uid = ? ORDER BY 1
"""
