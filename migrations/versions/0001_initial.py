"""Initial schema: pods, containers, allocations, per-NUMA device rows, registered devices.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Spelled out table by table rather than ``metadata.create_all`` so that later changes to
``podstore/schema.py`` never rewrite what this revision means.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pods",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pods"),
        sa.UniqueConstraint("uid", name="uq_pods_uid"),
    )
    op.create_table(
        "containers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pod_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["pod_id"], ["pods.id"], name="fk_containers_pod_id_pods", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_containers"),
        sa.UniqueConstraint("pod_id", "name", name="uq_containers_pod_id_name"),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("container_id", sa.Integer(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device_ids_null", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column("alloc_resp", sa.LargeBinary(), nullable=True),
        sa.Column(
            "alloc_resp_json_null", sa.Boolean(), server_default=sa.text("0"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["container_id"],
            ["containers.id"],
            name="fk_allocations_container_id_containers",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_allocations"),
        sa.UniqueConstraint(
            "container_id", "resource", name="uq_allocations_container_id_resource"
        ),
    )
    op.create_table(
        "allocation_devices",
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("numa_node", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["allocation_id"],
            ["allocations.id"],
            name="fk_allocation_devices_allocation_id_allocations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "allocation_id", "numa_node", "position", name="pk_allocation_devices"
        ),
    )
    op.create_index(
        "ix_allocation_devices_device_id", "allocation_devices", ["device_id"], unique=False
    )
    op.create_table(
        "empty_numa_lists",
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("numa_node", sa.BigInteger(), nullable=False),
        sa.Column("is_null", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["allocation_id"],
            ["allocations.id"],
            name="fk_empty_numa_lists_allocation_id_allocations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("allocation_id", "numa_node", name="pk_empty_numa_lists"),
    )
    op.create_table(
        "registered_resources",
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("is_null", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("resource", name="pk_registered_resources"),
    )
    op.create_table(
        "registered_devices",
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["resource"],
            ["registered_resources.resource"],
            name="fk_registered_devices_resource_registered_resources",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("resource", "position", name="pk_registered_devices"),
    )
    op.create_table(
        "store_meta",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_store_meta"),
    )


def downgrade() -> None:
    op.drop_table("store_meta")
    op.drop_table("registered_devices")
    op.drop_table("registered_resources")
    op.drop_table("empty_numa_lists")
    op.drop_index("ix_allocation_devices_device_id", table_name="allocation_devices")
    op.drop_table("allocation_devices")
    op.drop_table("allocations")
    op.drop_table("containers")
    op.drop_table("pods")
