"""The central tables in SQLAlchemy Core, which the fleet migrations follow (docs/fleet.md,
"Central schema"): the history, each store's current state (written in the transaction of the
events that produced it), and ``fleet_stores``, one row per store.

Every primary key but ``fleet_node_grants``'s begins with ``store_id`` and the views join on it
only, so that Citus keeps all of one store's rows, and every join, on one shard.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from podstore.fleet.sql import VERSION_TABLE
from podstore.storage.schema import END_EVENT_OPS, EVENT_OPS, NAMING_CONVENTION, NODE_EVENT_OPS

__all__ = ["NOT_PER_STORE", "VERSION_TABLE", "metadata"]

#: Tables whose primary key does not begin with store_id (docs/fleet.md, "Citus").
NOT_PER_STORE = frozenset({"fleet_node_grants"})

# The node schema's naming convention, so constraints are named alike on both sides.
metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _store_id() -> Column[str]:
    return Column("store_id", Uuid(as_uuid=False), nullable=False)


def _key() -> tuple[Column[str], Column[str], Column[str]]:
    return (
        Column("pod_uid", Text, nullable=False),
        Column("container", Text, nullable=False),
        Column("resource", Text, nullable=False),
    )


def _ts_range() -> CheckConstraint:
    # Times Python reads back (revision f0005): no infinity, no year past 9999.
    return CheckConstraint(
        "ts >= CAST('1970-01-01 00:00:00+00' AS timestamptz) "
        "AND ts < CAST('9999-01-01 00:00:00+00' AS timestamptz)",
        name="ts",
    )


fleet_stores = Table(
    "fleet_stores",
    metadata,
    _store_id(),
    Column("node", Text, nullable=False),
    # The newest node seq held: every event up to it is held, or a snapshot stands in for it.
    Column("last_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_shipped_at", DateTime(timezone=True), nullable=True),
    Column(
        "first_shipped_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
    ),
    # What the next event must chain from: event last_seq's hash or a snapshot's anchor.
    Column("head_hash", LargeBinary, nullable=True),
    # Kept by the shipping functions, so `fleet nodes` never counts the history.
    *(
        Column(name, BigInteger, nullable=False, server_default=text("0"))
        for name in ("events", "entries", "device_rows", "snapshots", "refusals")
    ),
    Column("last_refusal", Text, nullable=True),
    Column("last_refusal_at", DateTime(timezone=True), nullable=True),
    # Retired (`fleet retire`): kept as history, left out of the current-state views.
    Column("retired_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("store_id"),
)

fleet_events = Table(
    "fleet_events",
    metadata,
    _store_id(),
    Column("seq", BigInteger, nullable=False),
    Column("ts", DateTime(timezone=True), nullable=False),
    Column("op", Text, nullable=False),
    Column("pod_uid", Text, nullable=True),
    Column("container", Text, nullable=True),
    Column("resource", Text, nullable=False),
    # As on the node: the NUMA map of an entry event, the device list of a registered event.
    Column("device_ids", JSONB, nullable=True),
    # Every device the event names (the node's allocation_event_devices), for the GIN index:
    # one array per event costs less to ingest than a row per device with two b-trees.
    Column("devices", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    # What the event's hash covers besides the columns above: the node's JSON text as written
    # (jsonb reorders keys), the devices a replace released; NULL hash: shipped before f0002.
    Column("device_ids_text", Text, nullable=True),
    Column("released", Text, nullable=True),
    Column("hash", LargeBinary, nullable=True),
    PrimaryKeyConstraint("store_id", "seq"),
    _ts_range(),
    CheckConstraint(
        "op IN (" + ", ".join(f"'{op}'" for op in EVENT_OPS + NODE_EVENT_OPS + END_EVENT_OPS) + ")",
        name="op",
    ),
    # An entry's latest event up to an instant (owners at a time).
    Index("ix_fleet_events_key", "store_id", "pod_uid", "container", "resource", "seq"),
    # Every event naming a device, fleet-wide (devices @> ARRAY[...]).
    Index("ix_fleet_events_devices", "devices", postgresql_using="gin"),
)

fleet_entries = Table(
    "fleet_entries",
    metadata,
    _store_id(),
    *_key(),
    # The NUMA map as the node's events carry it ({"0": ["GPU-0"], "-1": [...]}; NULL: null).
    Column("device_ids", JSONB, nullable=True),
    # The node seq of the event (or snapshot) that set this state.
    Column("seq", BigInteger, nullable=False),
    PrimaryKeyConstraint("store_id", "pod_uid", "container", "resource"),
)

fleet_allocations = Table(
    "fleet_allocations",
    metadata,
    _store_id(),
    *_key(),
    # fleet_entries.seq: a batch deletes the old version's rows and inserts the new ones in one
    # statement, under different keys.
    Column("seq", BigInteger, nullable=False),
    Column("numa_node", BigInteger, nullable=False),
    Column("position", Integer, nullable=False),
    Column("device_id", Text, nullable=False),
    PrimaryKeyConstraint(
        "store_id", "pod_uid", "container", "resource", "seq", "numa_node", "position"
    ),
    # Who holds a device now; recounting double allocations probes device, store, resource.
    Index("ix_fleet_allocations_device", "device_id", "store_id", "resource", "pod_uid"),
)

# Devices held from more than one pod of a store, recounted by every batch, so that
# v_fleet_double_allocations reads a handful of rows instead of grouping every allocation.
fleet_double_allocated = Table(
    "fleet_double_allocated",
    metadata,
    _store_id(),
    Column("resource", Text, nullable=False),
    Column("device_id", Text, nullable=False),
    Column("pod_count", Integer, nullable=False),
    PrimaryKeyConstraint("store_id", "resource", "device_id"),
)

fleet_registered = Table(
    "fleet_registered",
    metadata,
    _store_id(),
    Column("resource", Text, nullable=False),
    Column("device_ids", JSONB, nullable=True),
    PrimaryKeyConstraint("store_id", "resource"),
)

# The node's other items now (revision f0003: CPU, memory, DRA, topology, pod names), kept from
# the ``cpu-``, ``memory-``, ``dra-`` and ``node-`` events under their key (storage/node/items.py).
fleet_node_items = Table(
    "fleet_node_items",
    metadata,
    _store_id(),
    # The key as one value: the JSON text of [pod_uid, container, resource] (pod_uid and
    # container may be NULL, which a primary key column may not).
    Column("item_key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("pod_uid", Text, nullable=True),
    Column("container", Text, nullable=True),
    Column("resource", Text, nullable=False),
    Column("value", JSONB, nullable=True),
    # The DRA devices a claim names (driver/pool/device), as its events list them.
    Column("devices", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    # The node seq of the event (or snapshot) that set it.
    Column("seq", BigInteger, nullable=False),
    PrimaryKeyConstraint("store_id", "item_key"),
    CheckConstraint("kind IN ('cpu', 'memory', 'dra', 'node')", name="kind"),
    # Who uses a DRA device now, fleet-wide.
    Index("ix_fleet_node_items_devices", "devices", postgresql_using="gin"),
)

# The node's physical-device facts now (revision f0008), which write no history: its CDI devices'
# host nodes (the node's ``cdi_device_nodes``), and what each entry's plugin response names —
# host device nodes (``host``) and CDI device names (``cdi``). The shipper sends them whole with
# every batch; ``fleet_ship_physical`` rewrites a store's rows only when they differ.
fleet_cdi_device_nodes = Table(
    "fleet_cdi_device_nodes",
    metadata,
    _store_id(),
    Column("spec_path", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("host_path", Text, nullable=False),
    PrimaryKeyConstraint("store_id", "spec_path", "name", "host_path"),
)

fleet_response_nodes = Table(
    "fleet_response_nodes",
    metadata,
    _store_id(),
    Column("pod_uid", Text, nullable=False),
    Column("container", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("value", Text, nullable=False),
    PrimaryKeyConstraint("store_id", "pod_uid", "container", "resource", "kind", "value"),
    CheckConstraint("kind IN ('host', 'cdi')", name="kind"),
)

# Every allocation interval of the shipped history (revision f0009): v_fleet_allocation_intervals
# without the store's node and the physical id. Caught up when read, never on ingest:
# ``fleet_intervals_catch_up()`` recomputes the pods and claims the events past a store's mark
# name and moves the mark (docs/fleet.md, "Kept intervals"); nobody else writes either table.
fleet_intervals = Table(
    "fleet_intervals",
    metadata,
    _store_id(),
    Column("mechanism", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("device", Text, nullable=False),
    Column("pod_uid", Text, nullable=False),
    Column("container", Text, nullable=True),
    # The holder's key: the entry's resource, or the DRA claim.
    Column("key_resource", Text, nullable=False),
    # The seq of the event that began it: with the pod and the device, one interval.
    Column("start_seq", BigInteger, nullable=False),
    Column("start", DateTime(timezone=True), nullable=False),
    Column("end", DateTime(timezone=True), nullable=True),
    Column("end_source", Text, nullable=True),
    Column("namespace", Text, nullable=True),
    Column("pod_name", Text, nullable=True),
    # Fixed when the holding starts (the registration in force then).
    Column("share", Double, nullable=False),
    PrimaryKeyConstraint("store_id", "start_seq", "pod_uid", "resource", "device"),
    Index("ix_fleet_intervals_pod", "store_id", "pod_uid"),
    # A claim's rows; and a resource's device-plugin rows (their key is the resource), whose
    # shares a registration sets again.
    Index("ix_fleet_intervals_claim", "store_id", "key_resource"),
)

# The node seq each store's kept intervals are caught up through.
fleet_intervals_marks = Table(
    "fleet_intervals_marks",
    metadata,
    _store_id(),
    Column("seq", BigInteger, nullable=False),
    PrimaryKeyConstraint("store_id"),
)

# A snapshot stands in for history pruned before it was shipped: the state at ``at_seq``
# replaced the central state, and owners-at-time starts again from it for instants from ``ts``.
fleet_snapshots = Table(
    "fleet_snapshots",
    metadata,
    _store_id(),
    Column("at_seq", BigInteger, nullable=False),
    # last_seq before: the events after it up to at_seq the node lacked are missing_events.
    Column("after_seq", BigInteger, nullable=False),
    Column("missing_events", BigInteger, nullable=False),
    Column("entries", Integer, nullable=False),
    Column("registered", Integer, nullable=False),
    # Node time, never before an event or snapshot the fleet already held.
    Column("ts", DateTime(timezone=True), nullable=False),
    Column("taken_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # The node's chain value at at_seq, which the store's later events chain from.
    Column("anchor_hash", LargeBinary, nullable=True),
    PrimaryKeyConstraint("store_id", "at_seq"),
    _ts_range(),
)

fleet_snapshot_devices = Table(
    "fleet_snapshot_devices",
    metadata,
    _store_id(),
    Column("at_seq", BigInteger, nullable=False),
    *_key(),
    Column("device_id", Text, nullable=False),
    PrimaryKeyConstraint("store_id", "at_seq", "pod_uid", "container", "resource", "device_id"),
    Index("ix_fleet_snapshot_devices_device_id", "device_id", "store_id"),
)

# What event ``seq`` chains from where the event before it is not held: ``adopted`` (shipped
# before the chain), ``pruned`` (after pruned events), ``snapshot`` (after a snapshot).
fleet_chain_links = Table(
    "fleet_chain_links",
    metadata,
    _store_id(),
    Column("seq", BigInteger, nullable=False),
    Column("prev_hash", LargeBinary, nullable=False),
    Column("reason", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("store_id", "seq"),
    CheckConstraint("reason IN ('adopted', 'pruned', 'snapshot')", name="reason"),
)

fleet_store_log = Table(
    "fleet_store_log",
    metadata,
    _store_id(),
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("logged_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("action", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("by_role", Text, nullable=False, server_default=text("session_user")),
    PrimaryKeyConstraint("store_id", "id"),
)

fleet_node_grants = Table(
    "fleet_node_grants",
    metadata,
    Column("node", Text, nullable=False),
    Column("role_name", Text, nullable=False),
    Column("granted_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("node", "role_name"),
)
