"""The SQL of entries and registered devices: the podDevices writes and reads."""

from __future__ import annotations

from podstore.storage.sql import pods

# The path from a pod uid down to one container's allocations.
_CONTAINER_ALLOCATIONS = """
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
"""

# ---- writes --------------------------------------------------------------------------------

# The ids of an entry's three levels in one look-up (NULL where they do not exist yet).
ENTRY_IDS = """
    SELECT p.id, c.id, a.id
    FROM pods p
    LEFT JOIN containers c ON c.pod_id = p.id AND c.name = ?2
    LEFT JOIN allocations a ON a.container_id = c.id AND a.resource = ?3
    WHERE p.uid = ?1
"""
INSERT_POD = "INSERT INTO pods (uid) VALUES (?)"
INSERT_CONTAINER = "INSERT INTO containers (pod_id, name) VALUES (?, ?)"
# Above any id an entry ever had, spans of deleted entries included: a span names its entry.
_NEXT_ALLOCATION_ID = """
    max(coalesce((SELECT max(id) FROM allocations), 0),
        coalesce((SELECT max(allocation_id) FROM allocation_device_spans), 0)) + 1
"""
INSERT_ALLOCATION = f"""
    INSERT INTO allocations (id, container_id, resource, device_ids_null, alloc_resp,
                             alloc_resp_json_null, response)
    VALUES ({_NEXT_ALLOCATION_ID}, ?, ?, ?, ?, ?, ?)
"""
# A replacing insert keeps the row, and with it the entry's position (its id).
UPDATE_ALLOCATION = """
    UPDATE allocations
    SET device_ids_null = ?, alloc_resp = ?, alloc_resp_json_null = ?, response = ?
    WHERE id = ?
"""
HELD_DEVICES = """
    SELECT device_id FROM allocation_device_spans WHERE allocation_id = ? AND until_seq IS NULL
"""
HELD_BY_ALLOCATIONS = """
    SELECT allocation_id, device_id FROM allocation_device_spans
    WHERE allocation_id IN (SELECT value FROM json_each(?)) AND until_seq IS NULL
"""
# (seq, released devices as a JSON array of their hex() or NULL, allocation id): hex keeps
# IDs with U+0000 whole, which SQLite's JSON functions would cut.
CLOSE_SPANS = """
    UPDATE allocation_device_spans
    SET until_seq = ?1,
        until_released = CASE WHEN ?2 IS NULL THEN NULL
                              WHEN hex(device_id) IN (SELECT value FROM json_each(?2)) THEN 1
                              ELSE 0 END
    WHERE allocation_id = ?3 AND until_seq IS NULL
"""
CLEAR_EMPTY_LISTS = "DELETE FROM empty_numa_lists WHERE allocation_id = ?"
INSERT_SPAN = """
    INSERT INTO allocation_device_spans (allocation_id, since_seq, numa_node, position, device_id)
    VALUES (?, ?, ?, ?, ?)
"""
INSERT_EMPTY_LIST = """
    INSERT INTO empty_numa_lists (allocation_id, numa_node, is_null) VALUES (?, ?, ?)
"""
# Cascades to containers, allocations and empty-list markers (the spans are closed first).
DELETE_POD = "DELETE FROM pods WHERE uid = ?"
DELETE_ALL_PODS = "DELETE FROM pods"

# Bulk loading (import): ids are assigned by the caller so rows can go in with executemany.
ALL_POD_IDS = "SELECT uid, id FROM pods"
ALL_CONTAINER_IDS = "SELECT pod_id, name, id FROM containers"
ALL_ALLOCATION_IDS = "SELECT container_id, resource, id FROM allocations"
MAX_IDS = f"""
    SELECT (SELECT coalesce(max(id), 0) FROM pods),
           (SELECT coalesce(max(id), 0) FROM containers),
           {_NEXT_ALLOCATION_ID} - 1
"""
INSERT_POD_WITH_ID = "INSERT INTO pods (id, uid) VALUES (?, ?)"
INSERT_CONTAINER_WITH_ID = "INSERT INTO containers (id, pod_id, name) VALUES (?, ?, ?)"
INSERT_ALLOCATION_WITH_ID = """
    INSERT INTO allocations (id, container_id, resource, device_ids_null, alloc_resp,
                             alloc_resp_json_null, response)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""

CLEAR_REGISTERED = "DELETE FROM registered_resources"
DELETE_REGISTERED_RESOURCE = "DELETE FROM registered_resources WHERE resource = ?"
INSERT_REGISTERED_RESOURCE = "INSERT INTO registered_resources (resource, is_null) VALUES (?, ?)"
INSERT_REGISTERED_DEVICE = """
    INSERT INTO registered_devices (resource, position, device_id) VALUES (?, ?, ?)
"""
SET_META = """
    INSERT INTO store_meta (key, value) VALUES (?, ?)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""
GET_META = "SELECT value FROM store_meta WHERE key = ?"
DELETE_META = "DELETE FROM store_meta WHERE key = ?"

# ---- podDevices reads -----------------------------------------------------------------------

PODS = "SELECT uid FROM pods"
SIZE = "SELECT count(*) FROM pods"
HAS_POD = "SELECT 1 FROM pods WHERE uid = ?"

# No row: pod, container or resource unknown (None). One row with a NULL device: the entry
# exists with no devices (an empty set, which callers read as "already allocated").
CONTAINER_DEVICES = f"""
    SELECT d.device_id
    {_CONTAINER_ALLOCATIONS}
    LEFT JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
    WHERE p.uid = ? AND c.name = ? AND a.resource = ?
"""

# Set union over all containers of the pod.
POD_DEVICES = f"""
    SELECT DISTINCT d.device_id
    {_CONTAINER_ALLOCATIONS}
    JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
    WHERE p.uid = ? AND a.resource = ?
"""

# The container's (resource, device) pairs (a NULL row keeps a resource without devices a key
# in the accumulator, as upstream), compared as hex: JSON functions cut strings at U+0000.
_MINE = f"""
    mine (resource, device_id) AS (
        SELECT hex(a.resource), CASE WHEN d.device_id IS NOT NULL THEN hex(d.device_id) END
        {_CONTAINER_ALLOCATIONS}
        LEFT JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
        WHERE p.uid = :pod AND c.name = :container
    ),
    acc (resource, device_id) AS (
        SELECT r.key, v.value FROM json_each(:acc) AS r, json_each(r.value) AS v
    )
"""

# acc[res] ∪ devices(res), for every resource of the container.
ADD_CONTAINER_RESOURCES = f"""
    WITH {_MINE}
    SELECT resource, device_id FROM mine
    UNION
    SELECT resource, device_id FROM acc WHERE resource IN (SELECT resource FROM mine)
"""

# acc[res] \\ devices(res), for every resource of the container (NULL row: the resource key).
REMOVE_CONTAINER_RESOURCES = f"""
    WITH {_MINE}
    SELECT DISTINCT resource, NULL FROM mine
    UNION ALL
    SELECT * FROM (
        SELECT resource, device_id FROM acc WHERE resource IN (SELECT resource FROM mine)
        EXCEPT
        SELECT resource, device_id FROM mine
    )
"""

# devices(): one JSON array per resource, turned into a set in C (1.6-1.8x faster than a row
# per device, and no GROUP BY sorting every device row: docs/performance.md).
RESOURCES = "SELECT DISTINCT resource FROM allocations"
RESOURCE_DEVICES_JSON = """
    SELECT json_group_array(d.device_id)
    FROM allocations a
    LEFT JOIN allocation_device_spans d
      ON d.allocation_id = a.id AND d.until_seq IS NULL AND a.alloc_resp IS NOT NULL
    WHERE a.resource = ?
"""

# device_run_container_options: the container's stored responses, resources in byte order (no
# row: unknown container; a NULL resource: a container without entries).
CONTAINER_RESPONSES = """
    SELECT a.resource, a.alloc_resp
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    LEFT JOIN allocations a ON a.container_id = c.id
    WHERE p.uid = ? AND c.name = ?
    ORDER BY a.resource
"""

# Topology per device: its distinct NUMA ids other than -1 (NULL when it is only under -1).
# has_keys tells a resource whose NUMA map is empty (omitted upstream) from one whose keys
# all hold empty lists (an empty inner map upstream).
CONTAINER_TOPOLOGY = """
    SELECT a.resource,
           d.device_id,
           group_concat(DISTINCT CASE WHEN d.numa_node <> -1 THEN d.numa_node END),
           d.device_id IS NOT NULL
             OR EXISTS (SELECT 1 FROM empty_numa_lists e WHERE e.allocation_id = a.id)
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    LEFT JOIN allocations a ON a.container_id = c.id
    LEFT JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
    WHERE p.uid = ? AND c.name = ?
    GROUP BY a.id, d.device_id
"""

# The earliest inserted entry listing a device (of any resource, or of one).
_OWNER_OF = """
    SELECT p.uid, c.name
    FROM allocation_device_spans d
    JOIN allocations a ON a.id = d.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    WHERE d.device_id = ? AND d.until_seq IS NULL {}
    ORDER BY a.id
    LIMIT 1
"""
OWNER_OF_DEVICE = _OWNER_OF.format("")
OWNER_OF_RESOURCE_DEVICE = _OWNER_OF.format("AND a.resource = ?")

# ---- reading whole entries (storage/entries.read_entries) -----------------------------------
#
# Three scans, each in its table's primary-key order, so nothing is sorted however large the
# store (an entry's open spans share one since_seq, so key order is NUMA and list order).

_ENTRY_COLUMNS = """
    SELECT a.id, p.uid, c.name, a.resource, a.device_ids_null, a.alloc_resp,
           a.alloc_resp_json_null
    FROM allocations a
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
"""
ENTRIES = _ENTRY_COLUMNS + " ORDER BY a.id"
# Entries kubelet would write: those with a response.
ENTRIES_WITH_RESPONSE = _ENTRY_COLUMNS + " WHERE a.alloc_resp IS NOT NULL ORDER BY a.id"
ENTRIES_OF_POD = _ENTRY_COLUMNS + " WHERE p.uid = :pod ORDER BY a.id"

_ALLOCATIONS_OF_POD = """
    SELECT a.id FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    WHERE p.uid = :pod
"""
DEVICE_ROWS = """
    SELECT allocation_id, numa_node, device_id FROM allocation_device_spans
    WHERE until_seq IS NULL
    ORDER BY allocation_id, since_seq, numa_node, position
"""
DEVICE_ROWS_OF_POD = f"""
    SELECT allocation_id, numa_node, device_id FROM allocation_device_spans
    WHERE allocation_id IN ({_ALLOCATIONS_OF_POD}) AND until_seq IS NULL
    ORDER BY allocation_id, since_seq, numa_node, position
"""
EMPTY_LISTS = """
    SELECT allocation_id, numa_node, is_null FROM empty_numa_lists
    ORDER BY allocation_id, numa_node
"""
# One pod's entries with their NUMA maps in one statement (the delete events): a row per
# device, per empty-list marker (``empty`` 0: [], 1: null) and per entry without either.
ENTRY_LISTS_OF_POD = """
    SELECT a.id, c.name, a.resource, a.device_ids_null, d.numa_node, d.position, d.device_id,
           NULL AS empty
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    LEFT JOIN allocation_device_spans d ON d.allocation_id = a.id AND d.until_seq IS NULL
    WHERE p.uid = :pod
    UNION ALL
    SELECT a.id, c.name, a.resource, a.device_ids_null, e.numa_node, 0, NULL, e.is_null
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    JOIN empty_numa_lists e ON e.allocation_id = a.id
    WHERE p.uid = :pod
    ORDER BY 1, 5, 6
"""
EMPTY_LISTS_OF_POD = f"""
    SELECT allocation_id, numa_node, is_null FROM empty_numa_lists
    WHERE allocation_id IN ({_ALLOCATIONS_OF_POD})
    ORDER BY allocation_id, numa_node
"""

REGISTERED = """
    SELECT r.resource, r.is_null, d.device_id
    FROM registered_resources r
    LEFT JOIN registered_devices d ON d.resource = r.resource
    ORDER BY r.resource, d.position
"""

ENTRY_COUNT = "SELECT count(*) FROM allocations"

# Pods and containers of every manager (storage/sql/pods.py: one definition of a pod).
COUNTS = f"""
    SELECT ({pods.POD_COUNT}),
           ({pods.CONTAINER_COUNT}),
           (SELECT count(*) FROM allocations),
           (SELECT count(*) FROM allocation_device_spans WHERE until_seq IS NULL),
           (SELECT count(DISTINCT device_id) FROM allocation_device_spans
            WHERE until_seq IS NULL),
           (SELECT count(*) FROM registered_resources)
"""
