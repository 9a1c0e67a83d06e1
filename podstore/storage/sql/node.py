"""The SQL of the node's other managers, its topology and pod names (``storage/node/``).

Assignment rows are keyed three ways (schema.py, revision 0007); each way has its own delete,
so that the statement uses that way's partial unique index.
"""

from __future__ import annotations

# ---- node_files ----------------------------------------------------------------------------

FILE = "SELECT version, policy_name, form FROM node_files WHERE kind = ?"
DIGEST = "SELECT digest FROM node_files WHERE kind = ?"
SET_DIGEST = "UPDATE node_files SET digest = ? WHERE kind = ?"
SET_FILE = """
    INSERT INTO node_files (kind, version, policy_name, form) VALUES (?, ?, NULL, ?)
    ON CONFLICT (kind) DO UPDATE SET version = excluded.version, form = excluded.form
"""
SET_POLICY = "UPDATE node_files SET policy_name = ? WHERE kind = ?"

# ---- CPU manager -----------------------------------------------------------------------------

CPU_ROWS = """
    SELECT a.id, a.pod_uid, a.container, c.cpu
    FROM cpu_assignments a
    LEFT JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
    ORDER BY a.id, c.cpu
"""
CPU_INSERT = "INSERT INTO cpu_assignments (pod_uid, container) VALUES (?, ?)"
CPU_INSERT_CPU = "INSERT INTO cpu_assignment_cpus (assignment_id, cpu) VALUES (?, ?)"
CPU_DELETE_CONTAINER = "DELETE FROM cpu_assignments WHERE pod_uid = ? AND container = ?"
CPU_DELETE_POD = "DELETE FROM cpu_assignments WHERE pod_uid = ? AND container IS NULL"
CPU_DELETE_LEGACY = "DELETE FROM cpu_assignments WHERE pod_uid IS NULL AND container = ?"
CPU_SHARED = "SELECT cpu FROM cpu_shared ORDER BY cpu"
CPU_CLEAR_SHARED = "DELETE FROM cpu_shared"
CPU_INSERT_SHARED = "INSERT INTO cpu_shared (cpu) VALUES (?)"

# ---- memory manager --------------------------------------------------------------------------

MEMORY_ROWS = """
    SELECT a.id, a.pod_uid, a.container, a.blocks_null, b.position, b.memory_type,
           b.size_bytes, b.affinity_null, n.numa_node
    FROM memory_assignments a
    LEFT JOIN memory_blocks b ON b.assignment_id = a.id
    LEFT JOIN memory_block_numa n ON n.assignment_id = a.id AND n.position = b.position
    ORDER BY a.id, b.position, n.idx
"""
MEMORY_INSERT = """
    INSERT INTO memory_assignments (pod_uid, container, blocks_null) VALUES (?, ?, ?)
"""
MEMORY_INSERT_BLOCK = """
    INSERT INTO memory_blocks (assignment_id, position, memory_type, size_bytes, affinity_null)
    VALUES (?, ?, ?, ?, ?)
"""
MEMORY_INSERT_NUMA = """
    INSERT INTO memory_block_numa (assignment_id, position, idx, numa_node) VALUES (?, ?, ?, ?)
"""
MEMORY_DELETE_CONTAINER = "DELETE FROM memory_assignments WHERE pod_uid = ? AND container = ?"
MEMORY_DELETE_POD = "DELETE FROM memory_assignments WHERE pod_uid = ? AND container IS NULL"
MACHINE_ROWS = """
    SELECT n.numa_node, n.state_null, n.number_of_assignments, n.memory_map_null, n.cells,
           t.memory_type, t.table_null, t.total, t.system_reserved, t.allocatable, t.reserved,
           t.free
    FROM memory_numa_nodes n
    LEFT JOIN memory_numa_tables t ON t.numa_node = n.numa_node
    ORDER BY n.numa_node, t.memory_type
"""
MACHINE_INSERT_NODE = """
    INSERT INTO memory_numa_nodes (numa_node, state_null, number_of_assignments,
                                   memory_map_null, cells)
    VALUES (?, ?, ?, ?, ?)
"""
MACHINE_INSERT_TABLE = """
    INSERT INTO memory_numa_tables (numa_node, memory_type, table_null, total, system_reserved,
                                    allocatable, reserved, free)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
MACHINE_DELETE_NODE = "DELETE FROM memory_numa_nodes WHERE numa_node = ?"

# ---- DRA manager -----------------------------------------------------------------------------

DRA_CLAIMS = """
    SELECT id, position, claim_uid, claim_name, namespace, pod_uids_null, driver_state_null,
           classic
    FROM dra_claims ORDER BY position
"""
DRA_PODS = "SELECT claim_id, pod_uid FROM dra_claim_pods ORDER BY claim_id, pod_uid"
DRA_DRIVERS = """
    SELECT claim_id, driver, devices_null FROM dra_claim_drivers ORDER BY claim_id, driver
"""
DRA_DEVICES = """
    SELECT claim_id, driver, pool, device, share_id, request_names, cdi_device_ids
    FROM dra_devices ORDER BY claim_id, driver, position
"""
# One claim, by UID (a pod's claims: PodStore.pod_claims).
DRA_CLAIM = """
    SELECT id, position, claim_uid, claim_name, namespace, pod_uids_null, driver_state_null,
           classic
    FROM dra_claims WHERE claim_uid = ?
"""
DRA_PODS_OF = "SELECT claim_id, pod_uid FROM dra_claim_pods WHERE claim_id = ? ORDER BY pod_uid"
DRA_DRIVERS_OF = """
    SELECT claim_id, driver, devices_null FROM dra_claim_drivers WHERE claim_id = ?
    ORDER BY driver
"""
DRA_DEVICES_OF = """
    SELECT claim_id, driver, pool, device, share_id, request_names, cdi_device_ids
    FROM dra_devices WHERE claim_id = ? ORDER BY driver, position
"""
DRA_NEXT_POSITION = "SELECT coalesce(max(position), -1) + 1 FROM dra_claims"
DRA_POSITION = "SELECT position FROM dra_claims WHERE claim_uid = ?"
DRA_INSERT_CLAIM = """
    INSERT INTO dra_claims (position, claim_uid, claim_name, namespace, pod_uids_null,
                            driver_state_null, classic)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""
DRA_INSERT_POD = "INSERT INTO dra_claim_pods (claim_id, pod_uid) VALUES (?, ?)"
DRA_INSERT_DRIVER = """
    INSERT INTO dra_claim_drivers (claim_id, driver, devices_null) VALUES (?, ?, ?)
"""
DRA_INSERT_DEVICE = """
    INSERT INTO dra_devices (claim_id, driver, position, pool, device, share_id, request_names,
                             cdi_device_ids)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
DRA_DELETE_CLAIM = "DELETE FROM dra_claims WHERE claim_uid = ?"

# ---- topology and names ----------------------------------------------------------------------

NUMA_ROWS = "SELECT numa_node, cpu FROM numa_cpus ORDER BY numa_node, cpu"
# A CPU that moves to another NUMA node (a new topology) may be written under its new node
# before its old node's item is rewritten: it takes the new node at once.
NUMA_INSERT = (
    "INSERT INTO numa_cpus (cpu, numa_node) VALUES (?, ?) "
    "ON CONFLICT (cpu) DO UPDATE SET numa_node = excluded.numa_node"
)
NUMA_DELETE_NODE = "DELETE FROM numa_cpus WHERE numa_node = ?"
NAME_ROWS = "SELECT pod_uid, namespace, name FROM pod_names ORDER BY pod_uid"
NAME_INSERT = "INSERT INTO pod_names (pod_uid, namespace, name) VALUES (?, ?, ?)"
NAME_DELETE = "DELETE FROM pod_names WHERE pod_uid = ?"

# ---- node_items: each item's canon hash, payload and devices (storage/node/sync.py) ----------

# The wanted items of one sync, in the source's order (``ord``), in the connection's TEMP schema.
SETUP = (
    "CREATE TEMP TABLE IF NOT EXISTS node_wanted "
    "(item_key TEXT PRIMARY KEY, ord INTEGER NOT NULL, canon TEXT NOT NULL) WITHOUT ROWID",
)
WANTED_LOAD = "INSERT INTO temp.node_wanted (item_key, ord, canon) VALUES (?, ?, ?)"
WANTED_CLEAR = "DELETE FROM temp.node_wanted"
# What differs from the part's stored items: ``had`` 0 a new key (in ``ord`` order), 1 a changed
# canon, 2 a key that went; with the old payload and devices, for the events.
ITEMS_DIFFER = """
    SELECT w.item_key, n.item_key IS NOT NULL, n.payload, n.devices, w.ord
    FROM temp.node_wanted w
    LEFT JOIN node_items n ON n.part = :part AND n.item_key = w.item_key
    WHERE n.canon IS NOT w.canon
    UNION ALL
    SELECT n.item_key, 2, n.payload, n.devices, NULL
    FROM node_items n
    WHERE n.part = :part
      AND NOT EXISTS (SELECT 1 FROM temp.node_wanted w WHERE w.item_key = n.item_key)
"""
ITEM_PUT = """
    INSERT INTO node_items (part, item_key, canon, payload, devices) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (part, item_key) DO UPDATE SET canon = excluded.canon,
        payload = excluded.payload, devices = excluded.devices
"""
ITEM_DELETE = "DELETE FROM node_items WHERE part = ? AND item_key = ?"
ITEMS_OF = "SELECT item_key, canon, payload, devices FROM node_items WHERE part = ?"
ITEMS_CLEAR = "DELETE FROM node_items"
# Set by revision 0008's upgrade: node_items is to be filled from the stored rows.
_PENDING_KEY = "node_items_pending"
PENDING = f"SELECT 1 FROM store_meta WHERE key = '{_PENDING_KEY}'"
PENDING_CLEAR = f"DELETE FROM store_meta WHERE key = '{_PENDING_KEY}'"
