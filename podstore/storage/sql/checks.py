"""The SQL of the self-check (``storage/selfcheck.py``): each invariant query names the rows that
break one rule (no rows: the rule holds)."""

from __future__ import annotations

# From an allocation ``a`` to the names of its entry (``p.uid``, ``c.name``).
_NAMES = "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id"

TRIGGER_NAMES = "SELECT name FROM sqlite_master WHERE type = 'trigger'"

ORPHAN_CONTAINERS = """
    SELECT c.id, c.pod_id, c.name
    FROM containers c
    WHERE NOT EXISTS (SELECT 1 FROM pods p WHERE p.id = c.pod_id)
    ORDER BY c.id
"""
ORPHAN_ALLOCATIONS = """
    SELECT a.id, a.container_id, a.resource
    FROM allocations a
    LEFT JOIN containers c ON c.id = a.container_id
    WHERE c.id IS NULL OR NOT EXISTS (SELECT 1 FROM pods p WHERE p.id = c.pod_id)
    ORDER BY a.id
"""
ORPHAN_DEVICE_ROWS = """
    SELECT d.allocation_id, d.numa_node, d.position, d.device_id
    FROM allocation_devices d
    WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.id = d.allocation_id)
    ORDER BY 1, 2, 3
"""
ORPHAN_EMPTY_LISTS = """
    SELECT e.allocation_id, e.numa_node
    FROM empty_numa_lists e
    WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.id = e.allocation_id)
    ORDER BY 1, 2
"""
ORPHAN_REGISTERED_DEVICES = """
    SELECT d.resource, d.position, d.device_id
    FROM registered_devices d
    WHERE NOT EXISTS (SELECT 1 FROM registered_resources r WHERE r.resource = d.resource)
    ORDER BY 1, 2
"""
EMPTY_PODS = """
    SELECT p.id, p.uid
    FROM pods p
    WHERE NOT EXISTS (SELECT 1 FROM containers c WHERE c.pod_id = p.id)
    ORDER BY p.id
"""
EMPTY_CONTAINERS = """
    SELECT p.uid, c.name
    FROM containers c
    JOIN pods p ON p.id = c.pod_id
    WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.container_id = c.id)
    ORDER BY c.id
"""
POSITIONS = f"""
    SELECT p.uid, c.name, a.resource, d.numa_node, count(*), min(d.position), max(d.position)
    FROM allocation_devices d
    JOIN allocations a ON a.id = d.allocation_id
    {_NAMES}
    GROUP BY d.allocation_id, d.numa_node
    HAVING min(d.position) <> 0 OR max(d.position) <> count(*) - 1
    ORDER BY d.allocation_id, d.numa_node
"""
REGISTERED_POSITIONS = """
    SELECT resource, count(*), min(position), max(position)
    FROM registered_devices
    GROUP BY resource
    HAVING min(position) <> 0 OR max(position) <> count(*) - 1
    ORDER BY resource
"""
EMPTY_LIST_WITH_DEVICES = f"""
    SELECT p.uid, c.name, a.resource, e.numa_node
    FROM empty_numa_lists e
    JOIN allocations a ON a.id = e.allocation_id
    {_NAMES}
    WHERE EXISTS (SELECT 1 FROM allocation_devices d WHERE d.allocation_id = e.allocation_id
          AND d.numa_node = e.numa_node)
    ORDER BY e.allocation_id, e.numa_node
"""
NULL_MAP_WITH_DEVICES = f"""
    SELECT p.uid, c.name, a.resource
    FROM allocations a
    {_NAMES}
    WHERE a.device_ids_null AND (EXISTS (SELECT 1 FROM allocation_devices d WHERE
          d.allocation_id = a.id) OR EXISTS (SELECT 1 FROM empty_numa_lists e WHERE
          e.allocation_id = a.id))
    ORDER BY a.id
"""
NULL_RESPONSE_FLAG = f"""
    SELECT p.uid, c.name, a.resource
    FROM allocations a
    {_NAMES}
    WHERE a.alloc_resp_json_null AND (a.alloc_resp IS NULL OR length(a.alloc_resp) <> 0)
    ORDER BY a.id
"""
DUPLICATE_DEVICES = f"""
    SELECT p.uid, c.name, a.resource, d.numa_node, d.device_id, count(*)
    FROM allocation_devices d
    JOIN allocations a ON a.id = d.allocation_id
    {_NAMES}
    GROUP BY d.allocation_id, d.numa_node, d.device_id
    HAVING count(*) > 1
    ORDER BY d.allocation_id, d.numa_node, d.device_id
"""
STORE_META = """
    SELECT key, value
    FROM store_meta
    WHERE (key = 'entries_json' AND value NOT IN ('null', '[]')) OR (key =
          'registered_json_null' AND value NOT IN ('0', '1'))
    ORDER BY key
"""
STORED_RESPONSES = f"""
    SELECT p.uid, c.name, a.resource, a.alloc_resp, a.response
    FROM allocations a
    {_NAMES}
    WHERE a.alloc_resp IS NOT NULL
    ORDER BY a.id
"""
# A store at head has exactly one store_id, a UUID (revision 0003 writes it).
STORE_ID = """
    SELECT count(*), max(value)
    FROM store_meta
    WHERE key = 'store_id'
"""
# The devices each kept event names, against its hashed JSON: compared in Python
# (selfcheck._event_devices), whose JSON keeps every character of an ID; both in seq order.
EVENT_DEVICE_NAMES = """
    SELECT seq, device_ids, released, op, resource FROM allocation_events
    WHERE device_ids IS NOT NULL OR released IS NOT NULL
    ORDER BY seq
"""
EVENT_DEVICE_ROWS = """
    SELECT seq, device_id, released FROM allocation_event_devices ORDER BY seq, device_id
"""
# Device spans no podstore write leaves: an entry's open spans written by different events
# (one event writes an entry's whole list), a span that ends before it starts, or how it ended
# given without when.
SPANS = """
    SELECT allocation_id, 'open spans from events ' || group_concat(DISTINCT since_seq)
    FROM allocation_device_spans WHERE until_seq IS NULL
    GROUP BY allocation_id HAVING count(DISTINCT since_seq) > 1
    UNION ALL
    SELECT allocation_id, 'a span of seq ' || since_seq || ' ended at seq ' || until_seq
    FROM allocation_device_spans WHERE until_seq <= since_seq
    UNION ALL
    SELECT allocation_id, 'a span of seq ' || since_seq || ' that is open yet says how it ended'
    FROM allocation_device_spans WHERE until_seq IS NULL AND until_released IS NOT NULL
    ORDER BY 1
"""
