"""Device-seconds of pruned history, so that a prune is no reset of the device-seconds counter.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

The counter sums ``v_allocation_intervals``, which is as old as the history kept: pruning took
the seconds of the intervals it removed (and of the holdings it shortened) off the counter, and
Prometheus read every prune as a counter reset — ``increase()`` then counts the whole counter
again. A prune now adds what it took off, per ``(resource, namespace)``, to
``device_seconds_pruned``, and the counter is that plus the history's intervals.

Downgrading drops the table: the counter falls back to what the history keeps.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
# The lead re-points this when the revisions between are merged.
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = """CREATE TABLE device_seconds_pruned (
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    seconds REAL NOT NULL,
    CONSTRAINT pk_device_seconds_pruned PRIMARY KEY (resource, namespace)
) WITHOUT ROWID"""


def upgrade() -> None:
    op.execute(_TABLE)


def downgrade() -> None:
    op.execute("DROP TABLE device_seconds_pruned")
