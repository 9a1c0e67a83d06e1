"""The history's end evidence ships: ``fleet_events.op`` takes ``end``.

Revision ID: f0007
Revises: f0006
Create Date: 2026-12-06

A node's ``end`` event (storage/ends.py) names no device and changes no entry or item: the
shipping functions store it like any event (its ``devices`` empty) and the chain check covers
it as it covers the rest. Only the op CHECK widens. The downgrade removes the shipped ``end``
events first (the chain check then reports the gaps they leave, as it would for any event a
fleet lost) and narrows the CHECK again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "f0007"
down_revision: str | None = "f0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = (
    "'insert', 'replace', 'delete', 'import', 'backfill', 'registered', 'unregistered', "
    "'cpu-set', 'cpu-delete', 'memory-set', 'memory-delete', 'dra-set', 'dra-delete', "
    "'node-set', 'node-delete'"
)


def upgrade() -> None:
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint("ck_fleet_events_op", "fleet_events", f"op IN ({_BEFORE}, 'end')")


def downgrade() -> None:
    op.execute("DELETE FROM fleet_events WHERE op = 'end'")
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint("ck_fleet_events_op", "fleet_events", f"op IN ({_BEFORE})")
