"""The whole node: the CPU, memory and DRA managers' state, the NUMA topology, pod names.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05

New tables only (schema.py, "the node's other managers"): ``node_files`` (per checkpoint
kind: format, policy, the file's form), ``cpu_assignments`` / ``cpu_assignment_cpus``
/ ``cpu_shared``, ``memory_assignments`` / ``memory_blocks`` / ``memory_block_numa`` /
``memory_numa_nodes`` / ``memory_numa_tables``, ``dra_claims`` / ``dra_claim_pods`` /
``dra_claim_drivers`` / ``dra_devices``, ``numa_cpus`` and ``pod_names``; and the views of
docs/sql.md over them (a frozen copy of ``storage/sql/node_views.py`` as of this revision).
Nothing of the device manager's tables is touched: the views read it through ``v_allocations``.

The history takes the node's events in the same log and chain: the ``op`` CHECK of
``allocation_events`` gains ``cpu-set`` … ``node-delete``. SQLite cannot alter a constraint,
and rebuilding the event log would rewrite every event (and, through its foreign key, every
event device row); the CHECK only widens, which leaves every stored row valid, so the table's
stored CREATE text is edited in place the way SQLite documents for such changes
(``writable_schema``, then a higher ``schema_version`` so every connection re-reads the
schema). The edit replaces only the op list inside the constraint, whatever the rest of the
table's text is.

Downgrading drops the views and tables and narrows the CHECK again. The node's events cannot
stay under the narrower CHECK, so they go first, the way ``prune_history`` removes events: each
kept event whose predecessor goes gets a ``history_chain_links`` row with that predecessor's
hash, and when the newest events go the floor and the link of the next seq say where the chain
stands. The chain stays checkable; the node's history is lost (the downgrade says so when it
is run by hand: ``podstore migrate downgrade`` lists what it drops).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
# The lead re-points this to "0006" when the device tables' revision is merged before it.
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEVICE_OPS = ("insert", "replace", "delete", "import", "backfill", "registered", "unregistered")
_NODE_OPS = (
    "cpu-set",
    "cpu-delete",
    "memory-set",
    "memory-delete",
    "dra-set",
    "dra-delete",
    "node-set",
    "node-delete",
)
FLOOR_KEY = "history_seq_floor"

_TABLES = (
    """CREATE TABLE node_files (
    kind TEXT NOT NULL,
    version TEXT NOT NULL,
    policy_name TEXT,
    form TEXT NOT NULL,
    CONSTRAINT pk_node_files PRIMARY KEY (kind),
    CONSTRAINT ck_node_files_kind CHECK (kind IN ('cpu', 'memory', 'dra'))
) WITHOUT ROWID""",
    """CREATE TABLE cpu_assignments (
    id INTEGER NOT NULL,
    pod_uid TEXT,
    container TEXT,
    CONSTRAINT pk_cpu_assignments PRIMARY KEY (id),
    CONSTRAINT ck_cpu_assignments_key CHECK (pod_uid IS NOT NULL OR container IS NOT NULL)
)""",
    """CREATE TABLE cpu_assignment_cpus (
    assignment_id INTEGER NOT NULL,
    cpu INTEGER NOT NULL,
    CONSTRAINT pk_cpu_assignment_cpus PRIMARY KEY (assignment_id, cpu),
    CONSTRAINT fk_cpu_assignment_cpus_assignment_id_cpu_assignments FOREIGN KEY(assignment_id)
        REFERENCES cpu_assignments (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE cpu_shared (
    cpu INTEGER NOT NULL,
    CONSTRAINT pk_cpu_shared PRIMARY KEY (cpu)
) WITHOUT ROWID""",
    """CREATE TABLE memory_assignments (
    id INTEGER NOT NULL,
    pod_uid TEXT NOT NULL,
    container TEXT,
    blocks_null BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_memory_assignments PRIMARY KEY (id)
)""",
    """CREATE TABLE memory_blocks (
    assignment_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    memory_type TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    affinity_null BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_memory_blocks PRIMARY KEY (assignment_id, position),
    CONSTRAINT fk_memory_blocks_assignment_id_memory_assignments FOREIGN KEY(assignment_id)
        REFERENCES memory_assignments (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE memory_block_numa (
    assignment_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    numa_node BIGINT NOT NULL,
    CONSTRAINT pk_memory_block_numa PRIMARY KEY (assignment_id, position, idx),
    CONSTRAINT fk_memory_block_numa_assignment_id_memory_assignments FOREIGN KEY(assignment_id)
        REFERENCES memory_assignments (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE memory_numa_nodes (
    numa_node BIGINT NOT NULL,
    state_null BOOLEAN DEFAULT 0 NOT NULL,
    number_of_assignments BIGINT DEFAULT 0 NOT NULL,
    memory_map_null BOOLEAN DEFAULT 0 NOT NULL,
    cells TEXT,
    CONSTRAINT pk_memory_numa_nodes PRIMARY KEY (numa_node)
) WITHOUT ROWID""",
    """CREATE TABLE memory_numa_tables (
    numa_node BIGINT NOT NULL,
    memory_type TEXT NOT NULL,
    table_null BOOLEAN DEFAULT 0 NOT NULL,
    total BIGINT DEFAULT 0 NOT NULL,
    system_reserved BIGINT DEFAULT 0 NOT NULL,
    allocatable BIGINT DEFAULT 0 NOT NULL,
    reserved BIGINT DEFAULT 0 NOT NULL,
    free BIGINT DEFAULT 0 NOT NULL,
    CONSTRAINT pk_memory_numa_tables PRIMARY KEY (numa_node, memory_type),
    CONSTRAINT fk_memory_numa_tables_numa_node_memory_numa_nodes FOREIGN KEY(numa_node)
        REFERENCES memory_numa_nodes (numa_node) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE dra_claims (
    id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    claim_uid TEXT NOT NULL,
    claim_name TEXT NOT NULL,
    namespace TEXT NOT NULL,
    pod_uids_null BOOLEAN DEFAULT 0 NOT NULL,
    driver_state_null BOOLEAN DEFAULT 0 NOT NULL,
    classic TEXT,
    CONSTRAINT pk_dra_claims PRIMARY KEY (id),
    CONSTRAINT uq_dra_claims_claim_uid UNIQUE (claim_uid)
)""",
    """CREATE TABLE dra_claim_pods (
    claim_id INTEGER NOT NULL,
    pod_uid TEXT NOT NULL,
    CONSTRAINT pk_dra_claim_pods PRIMARY KEY (claim_id, pod_uid),
    CONSTRAINT fk_dra_claim_pods_claim_id_dra_claims FOREIGN KEY(claim_id)
        REFERENCES dra_claims (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE dra_claim_drivers (
    claim_id INTEGER NOT NULL,
    driver TEXT NOT NULL,
    devices_null BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_dra_claim_drivers PRIMARY KEY (claim_id, driver),
    CONSTRAINT fk_dra_claim_drivers_claim_id_dra_claims FOREIGN KEY(claim_id)
        REFERENCES dra_claims (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE dra_devices (
    claim_id INTEGER NOT NULL,
    driver TEXT NOT NULL,
    position INTEGER NOT NULL,
    pool TEXT NOT NULL,
    device TEXT NOT NULL,
    share_id TEXT,
    request_names TEXT,
    cdi_device_ids TEXT,
    CONSTRAINT pk_dra_devices PRIMARY KEY (claim_id, driver, position),
    CONSTRAINT fk_dra_devices_claim_id_dra_claims FOREIGN KEY(claim_id)
        REFERENCES dra_claims (id) ON DELETE CASCADE
) WITHOUT ROWID""",
    """CREATE TABLE numa_cpus (
    cpu INTEGER NOT NULL,
    numa_node INTEGER NOT NULL,
    CONSTRAINT pk_numa_cpus PRIMARY KEY (cpu)
) WITHOUT ROWID""",
    """CREATE TABLE pod_names (
    pod_uid TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    CONSTRAINT pk_pod_names PRIMARY KEY (pod_uid)
) WITHOUT ROWID""",
)
_INDEXES = (
    "CREATE UNIQUE INDEX ix_cpu_assignments_container_key ON cpu_assignments (pod_uid, container)"
    " WHERE pod_uid IS NOT NULL AND container IS NOT NULL",
    "CREATE UNIQUE INDEX ix_cpu_assignments_legacy_key ON cpu_assignments (container)"
    " WHERE pod_uid IS NULL",
    "CREATE UNIQUE INDEX ix_cpu_assignments_pod_key ON cpu_assignments (pod_uid)"
    " WHERE container IS NULL",
    "CREATE INDEX ix_cpu_assignment_cpus_cpu ON cpu_assignment_cpus (cpu)",
    "CREATE UNIQUE INDEX ix_memory_assignments_container_key"
    " ON memory_assignments (pod_uid, container)"
    " WHERE pod_uid IS NOT NULL AND container IS NOT NULL",
    "CREATE UNIQUE INDEX ix_memory_assignments_pod_key ON memory_assignments (pod_uid)"
    " WHERE container IS NULL",
    "CREATE INDEX ix_dra_claim_pods_pod_uid ON dra_claim_pods (pod_uid)",
    "CREATE INDEX ix_dra_devices_device ON dra_devices (driver, pool, device)",
    "CREATE INDEX ix_numa_cpus_numa_node ON numa_cpus (numa_node, cpu)",
)

# ---- frozen SQL: storage/sql/node_views.py as of this revision -------------------------------

_V_POD_NAMES = """
CREATE VIEW v_pod_names AS
SELECT pod_uid, namespace, name FROM pod_names
"""

_V_CPU_ASSIGNMENTS = """
CREATE VIEW v_cpu_assignments AS
SELECT a.pod_uid AS pod_uid, a.container AS container, c.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_assignments a
JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
LEFT JOIN numa_cpus t ON t.cpu = c.cpu
WHERE a.container IS NOT NULL
"""

_V_POD_CPUS = """
CREATE VIEW v_pod_cpus AS
SELECT a.pod_uid AS pod_uid, c.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_assignments a
JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
LEFT JOIN numa_cpus t ON t.cpu = c.cpu
WHERE a.container IS NULL
"""

_V_SHARED_CPUS = """
CREATE VIEW v_shared_cpus AS
SELECT s.cpu AS cpu, t.numa_node AS numa_node
FROM cpu_shared s
LEFT JOIN numa_cpus t ON t.cpu = s.cpu
"""

_V_MEMORY_ASSIGNMENTS = """
CREATE VIEW v_memory_assignments AS
SELECT a.pod_uid AS pod_uid, a.container AS container, b.memory_type AS memory_type,
       b.size_bytes AS size_bytes,
       CASE WHEN b.affinity_null THEN NULL ELSE (
           SELECT json_group_array(x.numa_node) FROM (
               SELECT DISTINCT n.numa_node FROM memory_block_numa n
               WHERE n.assignment_id = b.assignment_id AND n.position = b.position
               ORDER BY n.numa_node) x) END AS numa_nodes
FROM memory_assignments a
JOIN memory_blocks b ON b.assignment_id = a.id
WHERE a.container IS NOT NULL
"""

_V_POD_MEMORY = """
CREATE VIEW v_pod_memory AS
SELECT a.pod_uid AS pod_uid, b.memory_type AS memory_type, b.size_bytes AS size_bytes,
       CASE WHEN b.affinity_null THEN NULL ELSE (
           SELECT json_group_array(x.numa_node) FROM (
               SELECT DISTINCT n.numa_node FROM memory_block_numa n
               WHERE n.assignment_id = b.assignment_id AND n.position = b.position
               ORDER BY n.numa_node) x) END AS numa_nodes
FROM memory_assignments a
JOIN memory_blocks b ON b.assignment_id = a.id
WHERE a.container IS NULL
"""

_V_MEMORY_NUMA = """
CREATE VIEW v_memory_numa AS
SELECT t.numa_node AS numa_node, t.memory_type AS memory_type, t.total AS total,
       t.system_reserved AS system_reserved, t.allocatable AS allocatable,
       t.reserved AS reserved, t.free AS free
FROM memory_numa_tables t
JOIN memory_numa_nodes n ON n.numa_node = t.numa_node
WHERE NOT t.table_null AND NOT n.state_null AND NOT n.memory_map_null
"""

_V_DRA_DEVICES = """
CREATE VIEW v_dra_devices AS
SELECT c.claim_uid AS claim_uid, c.namespace AS namespace, c.claim_name AS claim_name,
       p.pod_uid AS pod_uid, d.driver AS driver, d.pool AS pool, d.device AS device,
       d.share_id AS share_id, d.request_names AS request_names,
       d.cdi_device_ids AS cdi_device_ids
FROM dra_claims c
JOIN dra_devices d ON d.claim_id = c.id
LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
"""

_V_CONTAINER_NUMA = """
CREATE VIEW v_container_numa AS
WITH
dev (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT pod_uid, container, numa_node FROM v_allocations
        WHERE numa_node >= 0
        ORDER BY pod_uid, container, numa_node)
    GROUP BY pod_uid, container
),
cpu (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT a.pod_uid AS pod_uid, a.container AS container, t.numa_node AS numa_node
        FROM cpu_assignments a
        JOIN cpu_assignment_cpus c ON c.assignment_id = a.id
        JOIN numa_cpus t ON t.cpu = c.cpu
        WHERE a.pod_uid IS NOT NULL AND a.container IS NOT NULL
        ORDER BY 1, 2, 3)
    GROUP BY pod_uid, container
),
mem (pod_uid, container, nodes) AS (
    SELECT pod_uid, container, json_group_array(numa_node) FROM (
        SELECT DISTINCT a.pod_uid AS pod_uid, a.container AS container, n.numa_node AS numa_node
        FROM memory_assignments a
        JOIN memory_blocks b ON b.assignment_id = a.id
        JOIN memory_block_numa n ON n.assignment_id = b.assignment_id AND n.position = b.position
        WHERE a.container IS NOT NULL AND NOT b.affinity_null
        ORDER BY 1, 2, 3)
    GROUP BY pod_uid, container
),
keys (pod_uid, container) AS (
    SELECT pod_uid, container FROM v_allocations
    UNION
    SELECT pod_uid, container FROM cpu_assignments
    WHERE pod_uid IS NOT NULL AND container IS NOT NULL
    UNION
    SELECT pod_uid, container FROM memory_assignments WHERE container IS NOT NULL
),
sets (pod_uid, container, device_numa, cpu_numa, memory_numa) AS (
    SELECT k.pod_uid, k.container, d.nodes, c.nodes, m.nodes
    FROM keys k
    LEFT JOIN dev d ON d.pod_uid = k.pod_uid AND d.container = k.container
    LEFT JOIN cpu c ON c.pod_uid = k.pod_uid AND c.container = k.container
    LEFT JOIN mem m ON m.pod_uid = k.pod_uid AND m.container = k.container
)
SELECT s.pod_uid AS pod_uid, n.namespace AS namespace, n.name AS pod_name,
       s.container AS container, s.device_numa AS device_numa, s.cpu_numa AS cpu_numa,
       s.memory_numa AS memory_numa,
       CASE
           WHEN (s.device_numa IS NOT NULL) + (s.cpu_numa IS NOT NULL)
                + (s.memory_numa IS NOT NULL) < 2 THEN NULL
           WHEN coalesce(s.device_numa, s.cpu_numa, s.memory_numa)
                    = coalesce(s.cpu_numa, s.memory_numa, s.device_numa)
                AND coalesce(s.memory_numa, s.device_numa, s.cpu_numa)
                    = coalesce(s.device_numa, s.cpu_numa, s.memory_numa) THEN 1
           ELSE 0
       END AS aligned
FROM sets s
LEFT JOIN pod_names n ON n.pod_uid = s.pod_uid
"""

_V_NUMA_MISALIGNED = """
CREATE VIEW v_numa_misaligned AS
SELECT pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, aligned
FROM v_container_numa
WHERE aligned = 0
"""

_VIEWS = (
    ("v_pod_names", _V_POD_NAMES),
    ("v_cpu_assignments", _V_CPU_ASSIGNMENTS),
    ("v_pod_cpus", _V_POD_CPUS),
    ("v_shared_cpus", _V_SHARED_CPUS),
    ("v_memory_assignments", _V_MEMORY_ASSIGNMENTS),
    ("v_pod_memory", _V_POD_MEMORY),
    ("v_memory_numa", _V_MEMORY_NUMA),
    ("v_dra_devices", _V_DRA_DEVICES),
    ("v_container_numa", _V_CONTAINER_NUMA),
    ("v_numa_misaligned", _V_NUMA_MISALIGNED),
)


# ---- the op CHECK of allocation_events ---------------------------------------------------------

# The op list inside the CHECK, however the table's text spells the rest.
_OP_CHECK = re.compile(r"(CHECK\s*\(\s*op\s+IN\s*\()([^)]*)(\)\s*\))", re.IGNORECASE)


def _ops_sql(ops: Sequence[str]) -> str:
    return ", ".join(f"'{o}'" for o in ops)


def _set_op_check(bind: sa.Connection, ops: Sequence[str]) -> None:
    """Make the op CHECK of allocation_events allow exactly ``ops`` (SQLite's documented way
    to change a constraint that leaves the stored rows valid: edit the stored CREATE text, then
    bump schema_version so that every connection parses it again)."""
    (create,) = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'allocation_events'"
    ).one()
    found = _OP_CHECK.findall(create)
    if len(found) != 1:  # pragma: no cover - every revision since 0002 has exactly one
        raise RuntimeError("allocation_events has no single `CHECK (op IN (…))` to widen")
    edited = _OP_CHECK.sub(lambda m: m.group(1) + _ops_sql(ops) + m.group(3), create)
    version = int(bind.exec_driver_sql("PRAGMA schema_version").scalar_one())
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        bind.exec_driver_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'allocation_events'",
            (edited,),
        )
        bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


# ---- downgrade: the node's events go the way prune_history removes events ----------------------

_NODE_EVENTS = f"SELECT seq FROM allocation_events WHERE op IN ({_ops_sql(_NODE_OPS)})"
_HIGH_WATER = f"""
    SELECT max(coalesce((SELECT max(seq) FROM allocation_events), 0),
               coalesce((SELECT CAST(value AS INTEGER) FROM store_meta
                         WHERE key = '{FLOOR_KEY}'), 0))
"""
# A link for each kept event whose predecessor goes, and for the seq after the newest handed out
# when that one goes: the hash of the event that goes.
_LINKS = f"""
    INSERT INTO history_chain_links (seq, prev_hash)
    SELECT e.seq + 1, e.hash FROM allocation_events e
    WHERE e.seq IN ({_NODE_EVENTS})
      AND e.seq + 1 NOT IN ({_NODE_EVENTS})
      AND (e.seq = :high_water
           OR EXISTS (SELECT 1 FROM allocation_events k WHERE k.seq = e.seq + 1))
"""
_UNLINK = f"DELETE FROM history_chain_links WHERE seq IN ({_NODE_EVENTS})"
_DELETE = f"DELETE FROM allocation_events WHERE seq IN ({_NODE_EVENTS})"
_SET_FLOOR = f"""
    INSERT INTO store_meta (key, value) VALUES ('{FLOOR_KEY}', CAST(:seq AS TEXT))
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""


def _drop_node_events(bind: sa.Connection) -> None:
    top = int(bind.exec_driver_sql(_HIGH_WATER).scalar_one())
    bind.execute(sa.text(_LINKS), {"high_water": top})
    bind.exec_driver_sql(_UNLINK)
    removed = bind.exec_driver_sql(_DELETE).rowcount
    newest = bind.exec_driver_sql("SELECT max(seq) FROM allocation_events").scalar_one()
    if removed and (newest is None or int(newest) < top):
        bind.execute(sa.text(_SET_FLOOR), {"seq": top})


def upgrade() -> None:
    bind = op.get_bind()
    for create in _TABLES:
        op.execute(create)
    for create in _INDEXES:
        op.execute(create)
    _set_op_check(bind, _DEVICE_OPS + _NODE_OPS)
    for _name, create in _VIEWS:
        op.execute(create)


def downgrade() -> None:
    bind = op.get_bind()
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    _drop_node_events(bind)
    _set_op_check(bind, _DEVICE_OPS)
    # Children before parents, so that no ON DELETE CASCADE has anything to do.
    for create in reversed(_TABLES):
        name = create.split()[2]
        op.execute(f"DROP TABLE {name}")
