"""The SQL of a checkpoint sync (``storage/sync.py``; docs/watch.md): the file's rows in TEMP
tables and the set differences against the store.

``ord`` is an entry's position in the file (duplicates folded, the first position kept);
``sync_pairs`` ties each file entry the store also holds to its allocation. Comparisons are
of multisets: order never counts, a device listed twice counts twice, ``null`` is not ``[]``.
"""

from __future__ import annotations

#: The temporary tables, created on first use (``IF NOT EXISTS``: a connection keeps them).
SETUP = (
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_entries (
        ord INTEGER PRIMARY KEY,
        pod_uid TEXT NOT NULL,
        container TEXT NOT NULL,
        resource TEXT NOT NULL,
        device_ids_null INTEGER NOT NULL,
        alloc_resp BLOB NOT NULL,
        alloc_resp_json_null INTEGER NOT NULL,
        devices INTEGER NOT NULL
    )
    """,
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_devices (
        ord INTEGER NOT NULL, numa_node INTEGER NOT NULL, position INTEGER NOT NULL,
        device_id TEXT NOT NULL,
        PRIMARY KEY (ord, numa_node, position)
    ) WITHOUT ROWID
    """,
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_empty_lists (
        ord INTEGER NOT NULL, numa_node INTEGER NOT NULL, is_null INTEGER NOT NULL
    )
    """,
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_pairs (
        ord INTEGER PRIMARY KEY, allocation_id INTEGER NOT NULL UNIQUE
    )
    """,
    # Paired entries whose response bytes differ from the stored ones, with the file's
    # response decoded as JSON (storage/responses.to_json), which the stored one is compared
    # with (map order makes equal responses differ in bytes; the JSON is canonical).
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_candidates (
        ord INTEGER PRIMARY KEY, allocation_id INTEGER NOT NULL UNIQUE, response TEXT
    )
    """,
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_registered (
        resource TEXT PRIMARY KEY, is_null INTEGER NOT NULL
    )
    """,
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_registered_devices (
        resource TEXT NOT NULL, device_id TEXT NOT NULL
    )
    """,
    # Stored entries the file no longer holds, with their container and pod for the clean-up.
    """
    CREATE TEMP TABLE IF NOT EXISTS sync_doomed (
        allocation_id INTEGER PRIMARY KEY, container_id INTEGER NOT NULL, pod_id INTEGER NOT NULL
    )
    """,
)

#: Empties the tables of one sync (at its start and after it).
CLEAR = (
    "DELETE FROM temp.sync_entries",
    "DELETE FROM temp.sync_devices",
    "DELETE FROM temp.sync_empty_lists",
    "DELETE FROM temp.sync_pairs",
    "DELETE FROM temp.sync_candidates",
    "DELETE FROM temp.sync_registered",
    "DELETE FROM temp.sync_registered_devices",
    "DELETE FROM temp.sync_doomed",
)

# ---- loading the file ------------------------------------------------------------------------

LOAD_ENTRY = """
    INSERT INTO temp.sync_entries (ord, pod_uid, container, resource, device_ids_null,
                                   alloc_resp, alloc_resp_json_null, devices)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
LOAD_DEVICE = """
    INSERT INTO temp.sync_devices (ord, numa_node, position, device_id) VALUES (?, ?, ?, ?)
"""
LOAD_EMPTY_LIST = """
    INSERT INTO temp.sync_empty_lists (ord, numa_node, is_null) VALUES (?, ?, ?)
"""
LOAD_CANDIDATE_RESPONSE = "UPDATE temp.sync_candidates SET response = ? WHERE ord = ?"
LOAD_REGISTERED = "INSERT INTO temp.sync_registered (resource, is_null) VALUES (?, ?)"
LOAD_REGISTERED_DEVICE = """
    INSERT INTO temp.sync_registered_devices (resource, device_id) VALUES (?, ?)
"""

# ---- entries: which are new, gone, changed ----------------------------------------------------

# Each file entry the store holds, by the store's unique keys (index look-ups all the way).
PAIR = """
    INSERT INTO temp.sync_pairs (ord, allocation_id)
    SELECT t.ord, a.id
    FROM temp.sync_entries t
    JOIN pods p ON p.uid = t.pod_uid
    JOIN containers c ON c.pod_id = p.id AND c.name = t.container
    JOIN allocations a ON a.container_id = c.id AND a.resource = t.resource
"""

# File entries the store lacks, in file order: inserts.
NEW = """
    SELECT t.ord FROM temp.sync_entries t
    WHERE NOT EXISTS (SELECT 1 FROM temp.sync_pairs s WHERE s.ord = t.ord)
    ORDER BY t.ord
"""

# Stored entries the file lacks: deletes (kept, with their container and pod, for the writes).
DOOM = """
    INSERT INTO temp.sync_doomed (allocation_id, container_id, pod_id)
    SELECT a.id, a.container_id, c.pod_id
    FROM allocations a
    JOIN containers c ON c.id = a.container_id
    WHERE NOT EXISTS (SELECT 1 FROM temp.sync_pairs s WHERE s.allocation_id = a.id)
"""
DOOMED = """
    SELECT x.allocation_id, p.uid, c.name, a.resource
    FROM temp.sync_doomed x
    JOIN allocations a ON a.id = x.allocation_id
    JOIN containers c ON c.id = x.container_id
    JOIN pods p ON p.id = x.pod_id
    ORDER BY x.allocation_id
"""

# Paired entries whose device map differs. Cheap checks first (flags, row counts, empty-list
# markers, each device at the same (NUMA node, position): kubelet keeps each list's order
# between writes, so that settles nearly all); only reordered lists are compared as multisets.
CHANGED_DEVICES = """
    WITH moved (ord, allocation_id) AS (
        SELECT DISTINCT s.ord, s.allocation_id
        FROM temp.sync_devices f
        JOIN temp.sync_pairs s ON s.ord = f.ord
        WHERE NOT EXISTS (
            SELECT 1 FROM allocation_device_spans d
            WHERE d.allocation_id = s.allocation_id AND d.until_seq IS NULL
              AND d.numa_node = f.numa_node
              AND d.position = f.position AND d.device_id = f.device_id
        )
    ),
    file_side (ord, numa_node, device_id, n) AS (
        SELECT f.ord, f.numa_node, f.device_id, count(*)
        FROM moved m JOIN temp.sync_devices f ON f.ord = m.ord
        GROUP BY f.ord, f.numa_node, f.device_id
    ),
    store_side (ord, numa_node, device_id, n) AS (
        SELECT m.ord, d.numa_node, d.device_id, count(*)
        FROM moved m
        JOIN allocation_device_spans d ON d.allocation_id = m.allocation_id AND d.until_seq IS NULL
        GROUP BY m.ord, d.numa_node, d.device_id
    ),
    file_empty (ord, numa_node, is_null) AS (
        SELECT s.ord, e.numa_node, e.is_null
        FROM temp.sync_empty_lists e JOIN temp.sync_pairs s ON s.ord = e.ord
    ),
    store_empty (ord, numa_node, is_null) AS (
        SELECT s.ord, e.numa_node, e.is_null
        FROM temp.sync_pairs s JOIN empty_numa_lists e ON e.allocation_id = s.allocation_id
    )
    SELECT s.ord
    FROM temp.sync_pairs s
    JOIN temp.sync_entries t ON t.ord = s.ord
    JOIN allocations a ON a.id = s.allocation_id
    WHERE t.device_ids_null <> a.device_ids_null
       OR t.alloc_resp_json_null <> a.alloc_resp_json_null
       OR a.alloc_resp IS NULL
       OR t.devices <> (SELECT count(*) FROM allocation_device_spans d
                        WHERE d.allocation_id = s.allocation_id AND d.until_seq IS NULL)
    UNION SELECT ord FROM (SELECT * FROM file_side EXCEPT SELECT * FROM store_side)
    UNION SELECT ord FROM (SELECT * FROM store_side EXCEPT SELECT * FROM file_side)
    UNION SELECT ord FROM (SELECT * FROM file_empty EXCEPT SELECT * FROM store_empty)
    UNION SELECT ord FROM (SELECT * FROM store_empty EXCEPT SELECT * FROM file_empty)
"""

# Paired entries with a stored response whose bytes differ: the decoded comparison decides
# (CHANGED_RESPONSES, once the file's side is loaded).
CANDIDATES = """
    INSERT INTO temp.sync_candidates (ord, allocation_id)
    SELECT s.ord, s.allocation_id
    FROM temp.sync_pairs s
    JOIN temp.sync_entries t ON t.ord = s.ord
    JOIN allocations a ON a.id = s.allocation_id
    WHERE a.alloc_resp IS NOT NULL AND a.alloc_resp <> t.alloc_resp
"""
CANDIDATE_ORDS = "SELECT ord FROM temp.sync_candidates ORDER BY ord"

# A file entry whose AllocResp does not decode is skipped, as kubelet skips it: the store's
# entry, if any, becomes a delete.
DROP_ENTRY = (
    "DELETE FROM temp.sync_entries WHERE ord = ?",
    "DELETE FROM temp.sync_devices WHERE ord = ?",
    "DELETE FROM temp.sync_empty_lists WHERE ord = ?",
    "DELETE FROM temp.sync_pairs WHERE ord = ?",
    "DELETE FROM temp.sync_candidates WHERE ord = ?",
)


# Candidates whose decoded responses differ (positions count: they are the order run options
# merge in; env and annotation positions follow the sorted keys, which the JSON keeps).
CHANGED_RESPONSES = """
    SELECT c.ord FROM temp.sync_candidates c JOIN allocations a ON a.id = c.allocation_id
    WHERE c.response IS NOT a.response
"""

# ---- deletes ---------------------------------------------------------------------------------

# Cascades to empty-list markers (the entries' spans were closed by their delete events).
DELETE_DOOMED = """
    DELETE FROM allocations WHERE id IN (SELECT allocation_id FROM temp.sync_doomed)
"""
# Containers and pods the deletes left empty (a store never keeps them: podstore verify).
DELETE_EMPTIED_CONTAINERS = """
    DELETE FROM containers
    WHERE id IN (SELECT container_id FROM temp.sync_doomed)
      AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.container_id = containers.id)
"""
DELETE_EMPTIED_PODS = """
    DELETE FROM pods
    WHERE id IN (SELECT pod_id FROM temp.sync_doomed)
      AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.pod_id = pods.id)
"""

# ---- registered devices ----------------------------------------------------------------------

# Resources the file no longer registers, with their last list: 'unregistered'.
UNREGISTERED = """
    SELECT r.resource, r.is_null, d.device_id
    FROM registered_resources r
    LEFT JOIN registered_devices d ON d.resource = r.resource
    WHERE NOT EXISTS (SELECT 1 FROM temp.sync_registered t WHERE t.resource = r.resource)
    ORDER BY r.resource, d.position
"""
DELETE_REGISTERED = "DELETE FROM registered_resources WHERE resource = ?"

_FILE_REGISTERED = """
    SELECT resource, device_id, count(*) FROM temp.sync_registered_devices
    GROUP BY resource, device_id
"""
_STORE_REGISTERED = """
    SELECT d.resource, d.device_id, count(*)
    FROM temp.sync_registered t JOIN registered_devices d ON d.resource = t.resource
    GROUP BY d.resource, d.device_id
"""
# Resources the file registers that are new or whose list (as a multiset) or null flag changed.
CHANGED_REGISTERED = f"""
    SELECT t.resource FROM temp.sync_registered t
    LEFT JOIN registered_resources r ON r.resource = t.resource
    WHERE r.resource IS NULL OR r.is_null <> t.is_null
    UNION SELECT resource FROM ({_FILE_REGISTERED} EXCEPT {_STORE_REGISTERED})
    UNION SELECT resource FROM ({_STORE_REGISTERED} EXCEPT {_FILE_REGISTERED})
    ORDER BY 1
"""
