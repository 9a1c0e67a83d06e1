"""Lean writes: clustered (WITHOUT ROWID) child tables, and a history seq without AUTOINCREMENT.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

Only the physical side changes; every table keeps its name, columns, keys and meaning.

- Tables keyed by a composite or text primary key become ``WITHOUT ROWID``: the rows live in
  the primary-key B-tree itself, so a write touches one B-tree fewer per table (the device rows,
  the empty-list markers, the five decoded-response tables, the event-device rows, the
  registered devices and ``store_meta``).
- ``allocation_events.seq`` loses AUTOINCREMENT, whose ``sqlite_sequence`` row was one more page
  written by every commit. A seq is still never reused: writers take one more than the larger
  of ``max(seq)`` and ``store_meta.history_seq_floor``, which ``prune_history`` raises to the
  highest seq it removes. This revision carries ``sqlite_sequence``'s value over as that floor
  when it is above ``max(seq)`` (pruning had removed the newest events), and the downgrade
  writes the floor back into ``sqlite_sequence``.

Each table is rebuilt by copying its rows aside, dropping it, creating it anew and copying them
back, children before parents so that no ON DELETE CASCADE fires while a parent is dropped
(foreign keys stay on: the migration runs inside the open's transaction, where the pragma
cannot change). The views and the append-only trigger, which name these tables, are dropped
first and re-created from their stored text. The DDL is spelled out here, frozen, so that
later edits of ``storage/schema.py`` never change what this revision does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FLOOR_KEY = "history_seq_floor"

_FK_ALLOCATION = "FOREIGN KEY(allocation_id) REFERENCES allocations (id) ON DELETE CASCADE"


def _response(name: str, columns: str) -> str:
    return f"""CREATE TABLE {name} (
    allocation_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    {columns},
    CONSTRAINT pk_{name} PRIMARY KEY (allocation_id, position),
    CONSTRAINT fk_{name}_allocation_id_allocations {_FK_ALLOCATION}
)"""


def _events(autoincrement: bool) -> str:
    return f"""CREATE TABLE allocation_events (
    seq INTEGER NOT NULL PRIMARY KEY{" AUTOINCREMENT" if autoincrement else ""},
    ts TEXT NOT NULL,
    op TEXT NOT NULL,
    pod_uid TEXT,
    container TEXT,
    resource TEXT NOT NULL,
    device_ids TEXT,
    CONSTRAINT ck_allocation_events_ck_allocation_events_op CHECK (op IN ('insert', 'replace',
        'delete', 'import', 'backfill', 'registered', 'unregistered'))
)"""


# (table, CREATE TABLE without the WITHOUT ROWID suffix, clustered at this revision), parents
# before children: the creation order. Drops go in reverse.
_TABLES: tuple[tuple[str, str, bool], ...] = (
    (
        "store_meta",
        """CREATE TABLE store_meta (
    "key" TEXT NOT NULL,
    value TEXT NOT NULL,
    CONSTRAINT pk_store_meta PRIMARY KEY ("key")
)""",
        True,
    ),
    (
        "registered_resources",
        """CREATE TABLE registered_resources (
    resource TEXT NOT NULL,
    is_null BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_registered_resources PRIMARY KEY (resource)
)""",
        True,
    ),
    (
        "registered_devices",
        """CREATE TABLE registered_devices (
    resource TEXT NOT NULL,
    position INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    CONSTRAINT pk_registered_devices PRIMARY KEY (resource, position),
    CONSTRAINT fk_registered_devices_resource_registered_resources FOREIGN KEY(resource)
        REFERENCES registered_resources (resource) ON DELETE CASCADE
)""",
        True,
    ),
    (
        "allocation_devices",
        f"""CREATE TABLE allocation_devices (
    allocation_id INTEGER NOT NULL,
    numa_node BIGINT NOT NULL,
    position INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    CONSTRAINT pk_allocation_devices PRIMARY KEY (allocation_id, numa_node, position),
    CONSTRAINT fk_allocation_devices_allocation_id_allocations {_FK_ALLOCATION}
)""",
        True,
    ),
    (
        "empty_numa_lists",
        f"""CREATE TABLE empty_numa_lists (
    allocation_id INTEGER NOT NULL,
    numa_node BIGINT NOT NULL,
    is_null BOOLEAN NOT NULL,
    CONSTRAINT pk_empty_numa_lists PRIMARY KEY (allocation_id, numa_node),
    CONSTRAINT fk_empty_numa_lists_allocation_id_allocations {_FK_ALLOCATION}
)""",
        True,
    ),
    (
        "response_envs",
        _response("response_envs", "name TEXT NOT NULL,\n    value TEXT NOT NULL"),
        True,
    ),
    (
        "response_mounts",
        _response(
            "response_mounts",
            "container_path TEXT NOT NULL,\n    host_path TEXT NOT NULL,\n"
            "    read_only BOOLEAN NOT NULL",
        ),
        True,
    ),
    (
        "response_devices",
        _response(
            "response_devices",
            "container_path TEXT NOT NULL,\n    host_path TEXT NOT NULL,\n"
            "    permissions TEXT NOT NULL",
        ),
        True,
    ),
    (
        "response_annotations",
        _response("response_annotations", "name TEXT NOT NULL,\n    value TEXT NOT NULL"),
        True,
    ),
    ("response_cdi_devices", _response("response_cdi_devices", "name TEXT NOT NULL"), True),
    ("allocation_events", "", False),  # _events(): AUTOINCREMENT differs instead
    (
        "allocation_event_devices",
        """CREATE TABLE allocation_event_devices (
    seq INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    CONSTRAINT pk_allocation_event_devices PRIMARY KEY (seq, device_id),
    CONSTRAINT fk_allocation_event_devices_seq_allocation_events FOREIGN KEY(seq)
        REFERENCES allocation_events (seq) ON DELETE CASCADE
)""",
        True,
    ),
)

_INDEXES = (
    "CREATE INDEX ix_allocation_devices_device_id ON allocation_devices (device_id)",
    "CREATE INDEX ix_allocation_events_ts ON allocation_events (ts)",
    "CREATE INDEX ix_allocation_events_key ON allocation_events "
    "(pod_uid, container, resource, seq)",
    "CREATE INDEX ix_allocation_event_devices_device_id ON allocation_event_devices "
    "(device_id, seq)",
)


def _rebuild(*, lean: bool) -> None:
    """Recreate every table of _TABLES with its rows: clustered and without AUTOINCREMENT
    (``lean``), or as revision 0003 had them."""
    bind = op.get_bind()

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in bind.exec_driver_sql(sql).fetchall()]

    # Views and the trigger name the tables: keep their exact text, put them back at the end.
    saved = rows(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger') "
        "AND sql IS NOT NULL ORDER BY CASE type WHEN 'view' THEN 0 ELSE 1 END, rowid"
    )
    for kind, name, _sql in reversed(saved):
        op.execute(f"DROP {str(kind).upper()} {name}")
    for name, _ddl, _clustered in _TABLES:
        op.execute(f"CREATE TABLE _0004_{name} AS SELECT * FROM {name}")
    sequence = rows("SELECT seq FROM sqlite_sequence WHERE name = 'allocation_events'")
    old_sequence = int(sequence[0][0]) if sequence else 0
    for name, _ddl, _clustered in reversed(_TABLES):
        op.execute(f"DROP TABLE {name}")
    for name, ddl, clustered in _TABLES:
        if name == "allocation_events":
            op.execute(_events(autoincrement=not lean))
        else:
            op.execute(ddl + ("\nWITHOUT ROWID" if clustered and lean else ""))
        columns = ", ".join(f'"{r[1]}"' for r in rows(f"PRAGMA table_info(_0004_{name})"))
        op.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM _0004_{name}")
        op.execute(f"DROP TABLE _0004_{name}")
    for ddl in _INDEXES:
        op.execute(ddl)
    for _kind, _name, sql in saved:
        op.execute(str(sql))
    max_seq = int(rows("SELECT coalesce(max(seq), 0) FROM allocation_events")[0][0])
    if lean:
        if old_sequence > max_seq:
            bind.execute(
                sa.text(
                    "INSERT INTO store_meta (key, value) VALUES (:k, :v) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                {"k": FLOOR_KEY, "v": str(old_sequence)},
            )
        return
    floor = rows(f"SELECT value FROM store_meta WHERE key = '{FLOOR_KEY}'")
    top = max(max_seq, int(floor[0][0]) if floor else 0)
    op.execute(f"DELETE FROM store_meta WHERE key = '{FLOOR_KEY}'")
    # The inserts above made sqlite_sequence's row (when there were events); the floor may be
    # higher than any seq left.
    op.execute("DELETE FROM sqlite_sequence WHERE name = 'allocation_events'")
    if top:
        op.execute(f"INSERT INTO sqlite_sequence (name, seq) VALUES ('allocation_events', {top})")


def upgrade() -> None:
    _rebuild(lean=True)


def downgrade() -> None:
    _rebuild(lean=False)
