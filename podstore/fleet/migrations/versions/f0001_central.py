"""Central fleet schema: stores, their events, current state, snapshots, and the views.

Revision ID: f0001
Revises:
Create Date: 2026-12-03

Spelled out table by table (and the views as frozen text) so that later changes to
``podstore/fleet/schema.py`` or ``views.py`` never rewrite what this revision means.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "f0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPS = "'insert', 'replace', 'delete', 'import', 'backfill', 'registered', 'unregistered'"


def _store_id() -> sa.Column[str]:
    return sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False)


def _key() -> list[sa.Column[str]]:
    return [
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("container", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
    ]


_VIEWS = (
    (
        "v_fleet_allocations",
        """
CREATE VIEW v_fleet_allocations AS
SELECT s.node AS node, a.store_id AS store_id, a.pod_uid AS pod_uid,
       a.container AS container, a.resource AS resource, a.numa_node AS numa_node,
       a.device_id AS device_id
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
""",
    ),
    (
        "v_fleet_device_owners",
        """
CREATE VIEW v_fleet_device_owners AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
""",
    ),
    (
        "v_fleet_double_allocations",
        """
CREATE VIEW v_fleet_double_allocations AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       d.pod_count AS pod_count
FROM fleet_double_allocated d
JOIN fleet_allocations a
  ON a.store_id = d.store_id AND a.resource = d.resource AND a.device_id = d.device_id
JOIN fleet_stores s ON s.store_id = d.store_id
""",
    ),
)


def upgrade() -> None:
    op.create_table(
        "fleet_stores",
        _store_id(),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_shipped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "first_shipped_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("store_id", name="pk_fleet_stores"),
    )
    op.create_table(
        "fleet_events",
        _store_id(),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("op", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=True),
        sa.Column("container", sa.Text(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device_ids", postgresql.JSONB(), nullable=True),
        sa.Column(
            "devices",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("store_id", "seq", name="pk_fleet_events"),
        sa.CheckConstraint(f"op IN ({_OPS})", name="ck_fleet_events_op"),
    )
    op.create_index(
        "ix_fleet_events_key",
        "fleet_events",
        ["store_id", "pod_uid", "container", "resource", "seq"],
    )
    op.create_index("ix_fleet_events_devices", "fleet_events", ["devices"], postgresql_using="gin")
    op.create_table(
        "fleet_entries",
        _store_id(),
        *_key(),
        sa.Column("device_ids", postgresql.JSONB(), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id", "pod_uid", "container", "resource", name="pk_fleet_entries"
        ),
    )
    op.create_table(
        "fleet_allocations",
        _store_id(),
        *_key(),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("numa_node", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id",
            "pod_uid",
            "container",
            "resource",
            "seq",
            "numa_node",
            "position",
            name="pk_fleet_allocations",
        ),
    )
    op.create_index(
        "ix_fleet_allocations_device",
        "fleet_allocations",
        ["device_id", "store_id", "resource", "pod_uid"],
    )
    op.create_table(
        "fleet_double_allocated",
        _store_id(),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.Column("pod_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id", "resource", "device_id", name="pk_fleet_double_allocated"
        ),
    )
    op.create_table(
        "fleet_registered",
        _store_id(),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device_ids", postgresql.JSONB(), nullable=True),
        sa.PrimaryKeyConstraint("store_id", "resource", name="pk_fleet_registered"),
    )
    op.create_table(
        "fleet_snapshots",
        _store_id(),
        sa.Column("at_seq", sa.BigInteger(), nullable=False),
        sa.Column("after_seq", sa.BigInteger(), nullable=False),
        sa.Column("missing_events", sa.BigInteger(), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("registered", sa.Integer(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "taken_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("store_id", "at_seq", name="pk_fleet_snapshots"),
    )
    op.create_table(
        "fleet_snapshot_devices",
        _store_id(),
        sa.Column("at_seq", sa.BigInteger(), nullable=False),
        *_key(),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "store_id",
            "at_seq",
            "pod_uid",
            "container",
            "resource",
            "device_id",
            name="pk_fleet_snapshot_devices",
        ),
    )
    op.create_index(
        "ix_fleet_snapshot_devices_device_id",
        "fleet_snapshot_devices",
        ["device_id", "store_id"],
    )
    for _name, create in _VIEWS:
        op.execute(create)


def downgrade() -> None:
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    for table in (
        "fleet_snapshot_devices",
        "fleet_snapshots",
        "fleet_registered",
        "fleet_double_allocated",
        "fleet_allocations",
        "fleet_entries",
        "fleet_events",
        "fleet_stores",
    ):
        op.drop_table(table)
