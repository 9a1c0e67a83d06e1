"""Store identity: every store gets a store_id (a random UUID), kept for life.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

The identity is a ``store_meta`` row (key ``store_id``), so no table changes. A store created
from nothing gets its id when this revision runs at creation; an existing store gets one when
it is upgraded. The fleet database keys every node's events by it (docs/fleet.md). Downgrading
removes the row; upgrading again makes a new id (the store is then a new identity to the
fleet, which is what a store that forgot its id is).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.get_bind().execute(
        sa.text(
            "INSERT INTO store_meta (key, value) VALUES ('store_id', :id) "
            "ON CONFLICT (key) DO NOTHING"
        ),
        {"id": str(uuid.uuid4())},
    )


def downgrade() -> None:
    op.execute("DELETE FROM store_meta WHERE key = 'store_id'")
