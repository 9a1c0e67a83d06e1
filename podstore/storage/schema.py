"""The tables, in SQLAlchemy Core: the single source of truth that migrations follow.

One row per level of pod → container → resource → {NUMA → [device]}; wherever the checkpoint tells
JSON ``null`` from empty, a flag column or a marker row keeps the difference, so an imported file
exports byte for byte. Tables keyed by a composite or text key are ``WITHOUT ROWID`` (revision 0004:
one B-tree fewer per write); revision 0006 keeps the decoded response as one JSON column and the
device lists as spans the history shares (docs/sql.md, "Physical layout"; the views are
``storage/sql/views.py``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
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

# ``id`` is the entry's global position: a replacing insert updates the row in place and keeps
# it; a new entry gets one more than any id ever given to an entry (the device spans of a
# deleted entry keep its id, revision 0006), so ORDER BY id is first-insertion order (api.md).
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
    # NULL: no response at all (Go nil pointer). Otherwise the serialized
    # ContainerAllocateResponse exactly as received or imported.
    Column("alloc_resp", LargeBinary, nullable=True),
    # The entry came from a checkpoint whose AllocResp was null: kubelet restores an empty
    # response (alloc_resp = b""), and export writes null again.
    Column("alloc_resp_json_null", Boolean, nullable=False, server_default=text("0")),
    # Revision 0006: the response decoded, as JSON (storage/responses.py); NULL when it sets
    # nothing. The response_* views read it.
    Column("response", Text, nullable=True),
    UniqueConstraint("container_id", "resource"),
)


def _allocation_id() -> Column[int]:
    """The column that ties a child row to its allocation (deleted with it)."""
    return Column(
        "allocation_id", Integer, ForeignKey("allocations.id", ondelete="CASCADE"), nullable=False
    )


# Revision 0006: one row per (NUMA node, list position) of every device list an entry event
# wrote — the entry's devices now (``until_seq`` NULL: the ``allocation_devices`` view) and
# those it held before, closed by the seq of the event that ended them. Current holders and
# the history of a device are one B-tree apart through the device index, so an insert writes
# its devices once (storage/spans.py).
allocation_device_spans = Table(
    "allocation_device_spans",
    metadata,
    # No foreign key: a closed span outlives its allocation (whose id is never reused).
    Column("allocation_id", Integer, nullable=False),
    # The event that listed the device (0: listed before revision 0006).
    Column("since_seq", Integer, nullable=False),
    Column("numa_node", BigInteger, nullable=False),
    Column("position", Integer, nullable=False),
    Column("device_id", Text, nullable=False),
    # The event that ended the span; NULL while the entry lists the device.
    Column("until_seq", Integer, nullable=True),
    # How that event names the device: 0 listed (a delete, or listed again), 1 released,
    # NULL not at all (the entry a replacing import dropped and wrote anew).
    Column("until_released", Boolean, nullable=True),
    PrimaryKeyConstraint("allocation_id", "since_seq", "numa_node", "position"),
    Index("ix_allocation_device_spans_device_id", "device_id", "until_seq"),
    **_CLUSTERED,
)

# NUMA keys whose list holds no device: [] (is_null false) or null (is_null true). They have
# no allocation_devices rows, yet kubelet keeps and hashes the key.
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

# Whole-store facts of the checkpoint shape: 'entries_json' ('null' or '[]': how an export with
# no entries writes PodDeviceEntries) and 'registered_json_null' ('1' when RegisteredDevices
# itself was null).
store_meta = Table(
    "store_meta",
    metadata,
    Column("key", Text, nullable=False),
    Column("value", Text, nullable=False),
    PrimaryKeyConstraint("key"),
    **_CLUSTERED,
)


# ---- allocation history (revision 0002) ------------------------------------------------------
#
# Append-only: one row per change, written in the change's own transaction (events.py). ``seq``
# is never reused, even after prune_history removed the newest rows: a writer takes one more
# than the larger of max(seq) and store_meta's 'history_seq_floor', which prune_history raises
# to the highest seq it removed (revision 0004; before it AUTOINCREMENT did this, at the cost
# of a sqlite_sequence page per commit). ``ts`` (UTC, ISO 8601 with microseconds and 'Z')
# never decreases as seq grows.
# ``device_ids`` is JSON: the NUMA map of an entry event, the device list of a registered event.
# The ops it may carry are in storage/ops.py.

# Revision 0005: ``hash`` chains every event to its predecessor (pure/chain.py): the 32 bytes
# SHA-256(hash of the previous event ‖ the event's canonical bytes), from the genesis of the
# store's store_id. ``released`` lists the devices an entry event took away from an entry that
# existed before it (a replace, or an import or sync over an existing entry): a JSON array
# sorted by code point, NULL when none.
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
        "op IN (" + ", ".join(f"'{op}'" for op in EVENT_OPS + NODE_EVENT_OPS) + ")", name="op"
    ),
    CheckConstraint("length(hash) = 32", name="hash"),
    # No index on ts (revision 0006): seq order is time order, so a time is found by a binary
    # search over seq (sql/events.py), and no insert writes a ts index page.
    Index("ix_allocation_events_key", "pod_uid", "container", "resource", "seq"),
)

# The devices an event names that no device span records (revision 0006; before it, every
# event's rows, as ``allocation_event_devices``): those of registered-device events, of events
# written before revision 0006, and of any event appended through ``events.Pending`` without
# spans. ``released`` 0: the event lists the device (held after it, or for a delete until
# it); 1: it released the device. The ``allocation_event_devices`` view joins these rows with
# what the spans say (storage/spans.py).
event_device_rows = Table(
    "event_device_rows",
    metadata,
    Column(
        "seq",
        Integer,
        ForeignKey("allocation_events.seq", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("device_id", Text, nullable=False),
    Column("released", Boolean, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("seq", "device_id"),
    Index("ix_event_device_rows_device_id", "device_id", "seq"),
    **_CLUSTERED,
)

# The hash a kept event chains from when its predecessor (seq - 1) is not kept (revision 0005):
# written by prune_history for each kept event whose predecessor it removes, and for the seq
# after the newest ever handed out when it removes the newest events (so the next event, and
# head(), still know what the chain stands at). See storage/events.py, "The hash chain".
history_chain_links = Table(
    "history_chain_links",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("prev_hash", LargeBinary, nullable=False),
    CheckConstraint("length(prev_hash) = 32", name="prev_hash"),
)


# ---- the node's other managers, its topology and pod names (revision 0007) --------------------
#
# The CPU, memory and DRA managers' checkpoints (docs/node-files.md), normalized: one row per
# exclusive CPU, per memory block and its NUMA nodes, per NUMA node and memory type of the
# machine state, per DRA claim, pod and device. What only a file's form needs to be written back
# byte for byte (its format version, null-vs-empty of whole maps, the DRA list's name, …) is
# ``node_files.form``. Every change of these tables (but ``node_files``) is a history event in
# the same transaction (storage/node/, NODE_EVENT_OPS).
#
# An assignment row is keyed by pod and container as kubelet keys its maps: both set for a
# container's assignment, ``container`` NULL for the pod's own (``podEntries``), ``pod_uid``
# NULL for a CPU v1 entry keyed by container id only. Each form is unique on its own (partial
# unique indexes: SQLite lets NULLs repeat in a UNIQUE constraint).


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


# One row per checkpoint kind the store holds (cpu, memory, dra): the format its file was
# written in, the manager's policy, and ``form`` (JSON) for writing it back.
node_files = Table(
    "node_files",
    metadata,
    Column("kind", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("policy_name", Text, nullable=True),
    Column("form", Text, nullable=False),
    # Revision 0008: the digest of the file bytes the kind was last brought to (NULL: set
    # otherwise), so that a follower skips a rewrite of the same bytes.
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

# Memory manager: each assignment's blocks (null list kept apart from empty), each block's NUMA
# nodes in list order, and the machine state per NUMA node and memory type.
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

# Revision 0008: each item of the tables above (its ``part``: cpu, memory, dra, topology, names;
# its key as the JSON text of ``[pod_uid, container, resource]``) with its canonical text
# (storage/node/items.py), its payload and its devices (JSON array, NULL when none): a
# sync finds what differs with one query (storage/node/sync.py). Empty with
# ``node_items_pending`` set in ``store_meta`` until the first node write after the upgrade
# fills it.
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
