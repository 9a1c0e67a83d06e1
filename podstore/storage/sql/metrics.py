"""The SQL behind ``podstore metrics``: every store gauge in one read, so a scrape sees one
consistent snapshot. Rows are ``(metric, resource, value)``; ``resource`` is NULL for the
store-wide gauges, and a per-resource gauge has rows only where its count is not 0 (the
collector fills in the zeros for every resource that is held or registered)."""

from __future__ import annotations

GAUGES = """
    SELECT 'allocations', resource, count(*) FROM allocations GROUP BY resource
    UNION ALL
    SELECT 'allocated_devices', resource, count(DISTINCT device_id) FROM v_device_owners
    GROUP BY resource
    UNION ALL
    SELECT 'registered_devices', r.resource, count(d.device_id)
    FROM registered_resources r LEFT JOIN registered_devices d ON d.resource = r.resource
    GROUP BY r.resource
    UNION ALL
    SELECT 'double_allocated_devices', resource, count(DISTINCT device_id)
    FROM v_double_allocations GROUP BY resource
    UNION ALL
    SELECT 'pods', NULL, count(*) FROM pods
    UNION ALL
    SELECT 'run_option_conflicts', NULL, count(*) FROM v_run_option_conflicts
    UNION ALL
    SELECT 'history_events', NULL, count(*) FROM allocation_events
"""
