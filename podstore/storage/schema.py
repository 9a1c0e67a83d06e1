"""The tables, in SQLAlchemy Core: the single source of truth that migrations follow.

Wherever the checkpoint tells JSON ``null`` from empty, a flag column or a marker row keeps the
difference, so an imported file exports byte for byte (columns and layout: docs/sql.md).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    REAL,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from podstore.storage.ops import END_EVENT_OPS as END_EVENT_OPS
from podstore.storage.ops import EVENT_OPS as EVENT_OPS
from podstore.storage.ops import NODE_EVENT_OPS as NODE_EVENT_OPS

# Named constraints let Alembic's SQLite batch mode find and alter them later.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# Rows stored in their primary-key B-tree (SQLite WITHOUT ROWID).
_CLUSTERED: dict[str, Any] = {"sqlite_with_rowid": False}

pods = Table(
    "pods",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("uid", Text, nullable=False),
    UniqueConstraint("uid"),
)

containers = Table(
    "containers",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("pod_id", Integer, ForeignKey("pods.id", ondelete="CASCADE"), nullable=False),
    Column("name", Text, nullable=False),
    UniqueConstraint("pod_id", "name"),
)

# ``id`` is never reused (closed device spans keep it) and a replacing insert keeps it, so
# ORDER BY id is first-insertion order (api.md).
allocations = Table(
    "allocations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "container_id", Integer, ForeignKey("containers.id", ondelete="CASCADE"), nullable=False
    ),
    Column("resource", Text, nullable=False),
    # DeviceIDs was JSON null (Go nil map) rather than {}.
    Column("device_ids_null", Boolean, nullable=False, server_default=text("0")),
    # NULL: a Go nil pointer; else the ContainerAllocateResponse bytes as received.
    Column("alloc_resp", LargeBinary, nullable=True),
    # AllocResp was null: kubelet restores b"", and export writes null again.
    Column("alloc_resp_json_null", Boolean, nullable=False, server_default=text("0")),
    # The decoded response as JSON for the response_* views; NULL when it sets nothing.
    Column("response", Text, nullable=True),
    UniqueConstraint("container_id", "resource"),
)


def _allocation_id() -> Column[int]:
    """The column that ties a child row to its allocation (deleted with it)."""
    return Column(
        "allocation_id", Integer, ForeignKey("allocations.id", ondelete="CASCADE"), nullable=False
    )


# Every device list an entry event wrote, open (``until_seq`` NULL: ``allocation_devices``)
# or closed by the event that ended it: an insert writes each device once (storage/spans.py).
allocation_device_spans = Table(
    "allocation_device_spans",
    metadata,
    # No foreign key: a closed span outlives its allocation (whose id is never reused).
    Column("allocation_id", Integer, nullable=False),
    Column("since_seq", Integer, nullable=False),  # 0: listed before revision 0006
    Column("numa_node", BigInteger, nullable=False),
    Column("position", Integer, nullable=False),
    Column("device_id", Text, nullable=False),
    Column("until_seq", Integer, nullable=True),
    # 0: the ending event lists the device, 1: releases it, NULL: does not name it (an entry
    # a replacing import dropped and wrote anew).
    Column("until_released", Boolean, nullable=True),
    PrimaryKeyConstraint("allocation_id", "since_seq", "numa_node", "position"),
    Index("ix_allocation_device_spans_device_id", "device_id", "until_seq"),
    **_CLUSTERED,
)

# NUMA keys whose list is [] or null: no device rows, yet kubelet keeps and hashes the key.
empty_numa_lists = Table(
    "empty_numa_lists",
    metadata,
    _allocation_id(),
    Column("numa_node", BigInteger, nullable=False),
    Column("is_null", Boolean, nullable=False),
    PrimaryKeyConstraint("allocation_id", "numa_node"),
    **_CLUSTERED,
)

# The checkpoint's RegisteredDevices: resource → device list (null kept apart from []).
registered_resources = Table(
    "registered_resources",
    metadata,
    Column("resource", Text, nullable=False),
    Column("is_null", Boolean, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("resource"),
    **_CLUSTERED,
)

registered_devices = Table(
    "registered_devices",
    metadata,
    Column(
        "resource",
        Text,
        ForeignKey("registered_resources.resource", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("position", Integer, nullable=False),
    Column("device_id", Text, nullable=False),
    PrimaryKeyConstraint("resource", "position"),
    **_CLUSTERED,
)

# 'entries_json' ('null' or '[]': PodDeviceEntries of an export with no entries),
# 'registered_json_null' ('1': RegisteredDevices was null), 'history_seq_floor', 'store_id',
# 'boot_id' (the device checkpoint's top-level BootID, written back by export).
store_meta = Table(
    "store_meta",
    metadata,
    Column("key", Text, nullable=False),
    Column("value", Text, nullable=False),
    PrimaryKeyConstraint("key"),
    **_CLUSTERED,
)


# ---- allocation history (revisions 0002, 0005) ----------------------------------------------
#
# Append-only, written in the change's own transaction (events.py). ``seq`` is never reused:
# the next is above max(seq) and store_meta's 'history_seq_floor' (no AUTOINCREMENT: it cost
# a sqlite_sequence page per commit). ``ts`` never decreases as seq grows. ``hash`` chains each
# event to its predecessor (pure/chain.py).
allocation_events = Table(
    "allocation_events",
    metadata,
    Column("seq", Integer, primary_key=True),
    Column("ts", Text, nullable=False),
    Column("op", Text, nullable=False),
    Column("pod_uid", Text, nullable=True),
    Column("container", Text, nullable=True),
    Column("resource", Text, nullable=False),
    Column("device_ids", Text, nullable=True),
    Column("released", Text, nullable=True),
    Column("hash", LargeBinary, nullable=False),
    CheckConstraint(
        "op IN (" + ", ".join(f"'{op}'" for op in EVENT_OPS + NODE_EVENT_OPS + END_EVENT_OPS) + ")",
        name="op",
    ),
    CheckConstraint("length(hash) = 32", name="hash"),
    # No ts index: seq order is time order, so a time is a binary search over seq.
    Index("ix_allocation_events_key", "pod_uid", "container", "resource", "seq"),
)

# The devices an event names that no device span records (registered-device events, events
# before revision 0006, ``events.Pending`` without spans); the ``allocation_event_devices``
# view joins them with the spans.
event_device_rows = Table(
    "event_device_rows",
    metadata,
    Column("seq", Integer, ForeignKey("allocation_events.seq", ondelete="CASCADE"), nullable=False),
    Column("device_id", Text, nullable=False),
    Column("released", Boolean, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("seq", "device_id"),
    Index("ix_event_device_rows_device_id", "device_id", "seq"),
    **_CLUSTERED,
)

# The hash a kept event chains from when prune_history removed its predecessor; also for the
# seq after the newest handed out, so the next event and head() know where the chain stands.
history_chain_links = Table(
    "history_chain_links",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("prev_hash", LargeBinary, nullable=False),
    CheckConstraint("length(prev_hash) = 32", name="prev_hash"),
)


# ---- the node's other managers, its topology and pod names (revision 0007) --------------------
#
# The CPU, memory and DRA checkpoints normalized; what only writing a file back byte for byte
# needs is ``node_files.form``. Every change (but to ``node_files``) is a history event.
# An assignment is keyed by pod and container; ``container`` NULL: the pod's own
# (``podEntries``); ``pod_uid`` NULL: a CPU v1 entry keyed by container id. Partial unique
# indexes, as SQLite lets NULLs repeat in a UNIQUE constraint.


def _assignment_table(name: str, *columns: Column[object], legacy: bool) -> Table:
    """An assignment table keyed by pod and container (``legacy``: also by container id
    alone, as CPU v1 files key their entries)."""
    keys: list[Any] = [
        Index(
            f"ix_{name}_container_key",
            "pod_uid",
            "container",
            unique=True,
            sqlite_where=text("pod_uid IS NOT NULL AND container IS NOT NULL"),
        ),
        Index(f"ix_{name}_pod_key", "pod_uid", unique=True, sqlite_where=text("container IS NULL")),
    ]
    if legacy:
        keys.append(
            Index(
                f"ix_{name}_legacy_key",
                "container",
                unique=True,
                sqlite_where=text("pod_uid IS NULL"),
            )
        )
        keys.append(CheckConstraint("pod_uid IS NOT NULL OR container IS NOT NULL", name="key"))
    return Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True),
        Column("pod_uid", Text, nullable=legacy),
        Column("container", Text, nullable=True),
        *columns,
        *keys,
    )


def _owner(table: str, column: str = "assignment_id") -> Column[int]:
    return Column(column, Integer, ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=False)


# One row per checkpoint kind held: its format version, policy and ``form`` (JSON).
node_files = Table(
    "node_files",
    metadata,
    Column("kind", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("policy_name", Text, nullable=True),
    Column("form", Text, nullable=False),
    # Digest of the file last brought in (revision 0008): a follower skips the same bytes.
    Column("digest", Text, nullable=True),
    PrimaryKeyConstraint("kind"),
    CheckConstraint("kind IN ('cpu', 'memory', 'dra')", name="kind"),
    **_CLUSTERED,
)

# CPU manager: each assignment, its CPUs, and the shared (default) cpuset.
cpu_assignments = _assignment_table("cpu_assignments", legacy=True)
cpu_assignment_cpus = Table(
    "cpu_assignment_cpus",
    metadata,
    _owner("cpu_assignments"),
    Column("cpu", Integer, nullable=False),
    PrimaryKeyConstraint("assignment_id", "cpu"),
    Index("ix_cpu_assignment_cpus_cpu", "cpu"),
    **_CLUSTERED,
)
cpu_shared = Table(
    "cpu_shared",
    metadata,
    Column("cpu", Integer, nullable=False),
    PrimaryKeyConstraint("cpu"),
    **_CLUSTERED,
)

# Memory manager: blocks, each block's NUMA nodes, the machine state per node and type.
memory_assignments = _assignment_table(
    "memory_assignments",
    Column("blocks_null", Boolean, nullable=False, server_default=text("0")),
    legacy=False,
)
memory_blocks = Table(
    "memory_blocks",
    metadata,
    _owner("memory_assignments"),
    Column("position", Integer, nullable=False),
    Column("memory_type", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("affinity_null", Boolean, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("assignment_id", "position"),
    **_CLUSTERED,
)
memory_block_numa = Table(
    "memory_block_numa",
    metadata,
    _owner("memory_assignments"),
    Column("position", Integer, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("numa_node", BigInteger, nullable=False),
    PrimaryKeyConstraint("assignment_id", "position", "idx"),
    **_CLUSTERED,
)
memory_numa_nodes = Table(
    "memory_numa_nodes",
    metadata,
    Column("numa_node", BigInteger, nullable=False),
    # The map's value was a nil pointer (JSON null): the other columns are unused.
    Column("state_null", Boolean, nullable=False, server_default=text("0")),
    Column("number_of_assignments", BigInteger, nullable=False, server_default=text("0")),
    Column("memory_map_null", Boolean, nullable=False, server_default=text("0")),
    # JSON array of the NUMA nodes it is grouped with, as listed; NULL: a nil list.
    Column("cells", Text, nullable=True),
    PrimaryKeyConstraint("numa_node"),
    **_CLUSTERED,
)
memory_numa_tables = Table(
    "memory_numa_tables",
    metadata,
    Column(
        "numa_node",
        BigInteger,
        ForeignKey("memory_numa_nodes.numa_node", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("memory_type", Text, nullable=False),
    Column("table_null", Boolean, nullable=False, server_default=text("0")),
    Column("total", BigInteger, nullable=False, server_default=text("0")),
    Column("system_reserved", BigInteger, nullable=False, server_default=text("0")),
    Column("allocatable", BigInteger, nullable=False, server_default=text("0")),
    Column("reserved", BigInteger, nullable=False, server_default=text("0")),
    Column("free", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("numa_node", "memory_type"),
    **_CLUSTERED,
)

# DRA manager: claims in list order, the pods using each, and per driver the devices prepared.
dra_claims = Table(
    "dra_claims",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("claim_uid", Text, nullable=False),
    Column("claim_name", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod_uids_null", Boolean, nullable=False, server_default=text("0")),
    Column("driver_state_null", Boolean, nullable=False, server_default=text("0")),
    # DRA v1 (alpha) only: driver, class, resource handles and CDI devices, as JSON.
    Column("classic", Text, nullable=True),
    UniqueConstraint("claim_uid"),
)
dra_claim_pods = Table(
    "dra_claim_pods",
    metadata,
    _owner("dra_claims", "claim_id"),
    Column("pod_uid", Text, nullable=False),
    PrimaryKeyConstraint("claim_id", "pod_uid"),
    Index("ix_dra_claim_pods_pod_uid", "pod_uid"),
    **_CLUSTERED,
)
dra_claim_drivers = Table(
    "dra_claim_drivers",
    metadata,
    _owner("dra_claims", "claim_id"),
    Column("driver", Text, nullable=False),
    Column("devices_null", Boolean, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("claim_id", "driver"),
    **_CLUSTERED,
)
dra_devices = Table(
    "dra_devices",
    metadata,
    _owner("dra_claims", "claim_id"),
    Column("driver", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("pool", Text, nullable=False),
    Column("device", Text, nullable=False),
    Column("share_id", Text, nullable=True),
    # JSON arrays as listed; NULL: a nil list.
    Column("request_names", Text, nullable=True),
    Column("cdi_device_ids", Text, nullable=True),
    PrimaryKeyConstraint("claim_id", "driver", "position"),
    Index("ix_dra_devices_device", "driver", "pool", "device"),
    **_CLUSTERED,
)

# The node: which NUMA node each CPU belongs to (sysfs), and pod names (/var/log/pods).
numa_cpus = Table(
    "numa_cpus",
    metadata,
    Column("cpu", Integer, nullable=False),
    Column("numa_node", Integer, nullable=False),
    PrimaryKeyConstraint("cpu"),
    Index("ix_numa_cpus_numa_node", "numa_node", "cpu"),
    **_CLUSTERED,
)
pod_names = Table(
    "pod_names",
    metadata,
    Column("pod_uid", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("name", Text, nullable=False),
    PrimaryKeyConstraint("pod_uid"),
    **_CLUSTERED,
)

# Revision 0008: each node item (key: JSON ``[pod_uid, container, resource]``) with its
# canonical text (storage/node/items.py), so a sync finds what differs in one query. Empty,
# with store_meta ``node_items_pending``, until the first node write after the upgrade.
node_items = Table(
    "node_items",
    metadata,
    Column("part", Text, nullable=False),
    Column("item_key", Text, nullable=False),
    Column("canon", Text, nullable=False),
    Column("payload", Text, nullable=True),
    Column("devices", Text, nullable=True),
    PrimaryKeyConstraint("part", "item_key"),
    CheckConstraint("part IN ('cpu', 'memory', 'dra', 'topology', 'names')", name="part"),
    **_CLUSTERED,
)

# Revision 0009: the host device nodes each CDI device gives a container, per spec file
# (``spec_path``), so that a spec that cannot be read keeps what it gave before.
cdi_device_nodes = Table(
    "cdi_device_nodes",
    metadata,
    Column("spec_path", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("host_path", Text, nullable=False),
    PrimaryKeyConstraint("spec_path", "name", "host_path"),
    Index("ix_cdi_device_nodes_name", "name", "host_path"),
    **_CLUSTERED,
)

# Revision 0012: the device-seconds ``prune_history`` took off the intervals, per resource and
# namespace (``namespace`` '' when unknown), which the counter podstore_device_seconds_total
# adds back so that a prune is no counter reset.
device_seconds_pruned = Table(
    "device_seconds_pruned",
    metadata,
    Column("resource", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("seconds", REAL, nullable=False),
    PrimaryKeyConstraint("resource", "namespace"),
    **_CLUSTERED,
)

#: The tables revisions 0007 and 0008 added.
NODE_TABLES = (
    "node_files",
    "cpu_assignments",
    "cpu_assignment_cpus",
    "cpu_shared",
    "memory_assignments",
    "memory_blocks",
    "memory_block_numa",
    "memory_numa_nodes",
    "memory_numa_tables",
    "dra_claims",
    "dra_claim_pods",
    "dra_claim_drivers",
    "dra_devices",
    "numa_cpus",
    "pod_names",
    "node_items",
)
