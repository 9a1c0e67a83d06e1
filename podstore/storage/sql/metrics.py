"""The SQL behind ``podstore metrics``: every store gauge in one read, so a scrape sees one
consistent snapshot. Rows are ``(metric, resource, value)``; ``resource`` is NULL for the
store-wide gauges, and a per-resource gauge has rows only where its count is not 0 (the
collector fills in the zeros for every resource that is held or registered)."""

from __future__ import annotations

from podstore.storage.sql import pods

# Held devices are counted in one grouping pass rather than through v_device_owners and
# v_double_allocations (whose self-join costs three times as much at 20,000 entries); the
# counts are the views' (tests/test_metrics.py compares them on random stores): a device is
# double-allocated when entries of more than one pod list it, pod ids standing for the unique
# pod uids.
GAUGES = f"""
    WITH held (resource, device_id, pods) AS (
        SELECT a.resource, d.device_id, count(DISTINCT c.pod_id)
        FROM allocation_device_spans d
        JOIN allocations a ON a.id = d.allocation_id
        JOIN containers c ON c.id = a.container_id
        WHERE d.until_seq IS NULL
        GROUP BY a.resource, d.device_id
    )
    SELECT 'allocations', resource, count(*) FROM allocations GROUP BY resource
    UNION ALL
    SELECT 'allocated_devices', resource, count(*) FROM held GROUP BY resource
    UNION ALL
    SELECT 'registered_devices', r.resource, count(d.device_id)
    FROM registered_resources r LEFT JOIN registered_devices d ON d.resource = r.resource
    GROUP BY r.resource
    UNION ALL
    SELECT 'double_allocated_devices', resource, count(*) FROM held WHERE pods > 1
    GROUP BY resource
    UNION ALL
    SELECT 'pods', NULL, ({pods.POD_COUNT})
    UNION ALL
    SELECT 'run_option_conflicts', NULL, count(*) FROM v_run_option_conflicts
    UNION ALL
    SELECT 'history_events', NULL, count(*) FROM allocation_events
"""
