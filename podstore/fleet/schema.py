"""The central tables, in SQLAlchemy Core for PostgreSQL: what the fleet migrations follow.

Every table's primary key begins with ``store_id``, the node store's identity, so that Citus
can distribute each table by it with all of one store's rows on one shard (docs/fleet.md,
"Citus"); the views join on ``store_id`` only, so their joins stay on one shard too.

Two kinds of tables:

- the **history**: ``fleet_events`` (the node's ``allocation_events``, keyed ``(store_id,
  seq)``, with the devices each names, as in ``allocation_event_devices``), and the snapshots
  that healed gaps (``fleet_snapshots``, ``fleet_snapshot_devices``);
- the **current state** of each store: ``fleet_entries`` (one row per entry, its NUMA map as
  JSON), ``fleet_allocations`` (one row per listed device), ``fleet_registered`` and
  ``fleet_double_allocated``, written in the same transaction as the events that produced
  them.

``fleet_stores`` holds one row per store: its node name and ``last_seq``, the newest node
``seq`` this database holds (shipping resumes after it).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from podstore.fleet.sql import VERSION_TABLE
from podstore.storage.schema import EVENT_OPS, NAMING_CONVENTION

__all__ = ["VERSION_TABLE", "metadata"]

# The node schema's naming convention, so constraints are named alike on both sides.
metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _store_id() -> Column[str]:
    return Column("store_id", Uuid(as_uuid=False), nullable=False)


def _key() -> tuple[Column[str], Column[str], Column[str]]:
    """An entry's key: (pod, container, resource)."""
    return (
        Column("pod_uid", Text, nullable=False),
        Column("container", Text, nullable=False),
        Column("resource", Text, nullable=False),
    )


fleet_stores = Table(
    "fleet_stores",
    metadata,
    _store_id(),
    Column("node", Text, nullable=False),
    # The newest node seq held here: every event up to it is in fleet_events (or was pruned on
    # the node before it was shipped, and a snapshot stands in for it).
    Column("last_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("last_shipped_at", DateTime(timezone=True), nullable=True),
    Column(
        "first_shipped_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
    ),
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
    PrimaryKeyConstraint("store_id", "seq"),
    CheckConstraint("op IN (" + ", ".join(f"'{op}'" for op in EVENT_OPS) + ")", name="op"),
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
    # The seq of the entry's state (fleet_entries.seq): a batch deletes the old version's rows
    # and inserts the new version's in one statement, under different keys.
    Column("seq", BigInteger, nullable=False),
    Column("numa_node", BigInteger, nullable=False),
    Column("position", Integer, nullable=False),
    Column("device_id", Text, nullable=False),
    PrimaryKeyConstraint(
        "store_id", "pod_uid", "container", "resource", "seq", "numa_node", "position"
    ),
    # Who holds a device now, fleet-wide; and per store, the pods holding it (recounting
    # double allocations probes it by device, store and resource).
    Index("ix_fleet_allocations_device", "device_id", "store_id", "resource", "pod_uid"),
)

# The devices held from more than one pod of a store, kept with every batch (the devices the
# batch names and those already listed are recounted), so v_fleet_double_allocations reads a
# handful of rows instead of grouping every allocation of the fleet.
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

# A snapshot stands in for history the node pruned before it was shipped: the store's whole
# current state at node seq ``at_seq`` replaced the central state, and owners-at-time answers
# for instants from ``ts`` on start again from it.
fleet_snapshots = Table(
    "fleet_snapshots",
    metadata,
    _store_id(),
    Column("at_seq", BigInteger, nullable=False),
    # What fleet_stores.last_seq was before: events after it up to at_seq that the node no
    # longer had are ``missing_events``.
    Column("after_seq", BigInteger, nullable=False),
    Column("missing_events", BigInteger, nullable=False),
    Column("entries", Integer, nullable=False),
    Column("registered", Integer, nullable=False),
    # The node time the snapshot stands at (its newest kept event at or before at_seq).
    Column("ts", DateTime(timezone=True), nullable=False),
    Column("taken_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("store_id", "at_seq"),
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
