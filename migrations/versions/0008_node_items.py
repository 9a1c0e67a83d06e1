"""Each node item's canonical text kept beside it; each node file's bytes digested.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06

``node_items`` holds, per item of the CPU, memory and DRA managers, the topology and the pod
names (storage/node/items.py), its canonical text, its payload and its devices, so that a
sync finds what differs with one query instead of reading every item back
(storage/node/sync.py). ``node_files.digest`` is the digest of the file bytes a kind was last
brought to (NULL: set otherwise), so that a follower skips a rewrite of the same bytes.

The upgrade does not compute the items (that is podstore's code, not a frozen copy of it): it
leaves ``node_items`` empty and, when the store holds node items, sets ``node_items_pending``
in ``store_meta``; the first node write after it fills the table from the stored rows, in its
own transaction, and clears the key. The downgrade drops the table, the column and the key;
nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING = "node_items_pending"

_NODE_ITEMS = """CREATE TABLE node_items (
    part TEXT NOT NULL,
    item_key TEXT NOT NULL,
    canon TEXT NOT NULL,
    payload TEXT,
    devices TEXT,
    CONSTRAINT pk_node_items PRIMARY KEY (part, item_key),
    CONSTRAINT ck_node_items_part CHECK (part IN ('cpu', 'memory', 'dra', 'topology', 'names'))
) WITHOUT ROWID"""


def upgrade() -> None:
    op.execute(_NODE_ITEMS)
    op.execute("ALTER TABLE node_files ADD COLUMN digest TEXT")
    # Only a store that holds node items has any to fill.
    op.execute(
        f"INSERT INTO store_meta (key, value) SELECT '{_PENDING}', '1' "
        "WHERE EXISTS (SELECT 1 FROM node_files) OR EXISTS (SELECT 1 FROM numa_cpus) "
        "OR EXISTS (SELECT 1 FROM pod_names)"
    )


def downgrade() -> None:
    op.execute(f"DELETE FROM store_meta WHERE key = '{_PENDING}'")
    op.execute("ALTER TABLE node_files DROP COLUMN digest")
    op.execute("DROP TABLE node_items")
