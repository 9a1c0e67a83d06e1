"""History chain: every event hashed to its predecessor, and the devices each event released.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

- ``allocation_events.hash`` (BLOB NOT NULL, 32 bytes): ``SHA-256(hash(n-1) ‖ canonical(event
  n))`` from the genesis of the store's ``store_id`` (``podstore/pure/chain.py``).
- ``allocation_events.released`` (TEXT NULL): the devices an entry event took away from an
  entry that existed before it, as a JSON array sorted by code point; NULL when none.
- ``allocation_event_devices.released`` (0/1): the released devices get rows too (1), so
  ``history(device_id=X)`` finds the event that released X; "held" reads rows with 0 only.
- ``history_chain_links (seq, prev_hash)``: the hash a kept event chains from when its
  predecessor is not kept (``storage/events.py``, "The hash chain").

Upgrading chains the history that is there, in seq order from the genesis of the store_id.
Where events are already missing (``prune_history`` ran before this revision), their hashes
were never known: the first kept event after the gap gets a link holding the hash the chain
stood at (the previous kept event's, or the genesis), and so does the seq after the newest ever
handed out when the newest events were pruned. ``released`` is derived where the history still
shows it: a ``replace`` or ``import`` event whose key's previous kept event left the entry
present (not a ``delete``) released that event's devices minus its own. Where that previous
event was pruned, or for an ``import`` of a key with no earlier event, ``released`` stays NULL
(an ``import`` of a key with no earlier event normally made the entry, which releases
nothing; a pruned predecessor's devices are gone with it).

The two event tables are rebuilt (a NOT NULL column cannot be added to rows that exist): the old
ones are renamed aside, the new ones filled from them in chunks of :data:`CHUNK` events (the
hashes computed as the rows stream by: Python holds one chunk at a time), then
the old ones are dropped (with their indexes), child before parent so that no ON DELETE
CASCADE fires. The new indexes are built after the fill. The append-only trigger is dropped
first and re-created from its stored text. Downgrading rebuilds them without the new columns
(the released-device rows go) and drops the links table.

The byte rule is imported from ``podstore.pure.chain``: it is versioned (its genesis tag names
the format), and a new format would come with a new revision that re-chains; every other piece
of DDL is spelled out here, frozen.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from podstore.pure import chain

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Events read, hashed and written per round.
CHUNK = 5000

FLOOR_KEY = "history_seq_floor"

_OPS_CHECK = (
    "CONSTRAINT ck_allocation_events_ck_allocation_events_op CHECK (op IN ('insert', 'replace',\n"
    "        'delete', 'import', 'backfill', 'registered', 'unregistered'))"
)

_EVENTS_0004 = f"""CREATE TABLE allocation_events (
    seq INTEGER NOT NULL PRIMARY KEY,
    ts TEXT NOT NULL,
    op TEXT NOT NULL,
    pod_uid TEXT,
    container TEXT,
    resource TEXT NOT NULL,
    device_ids TEXT,
    {_OPS_CHECK}
)"""

_EVENTS_0005 = f"""CREATE TABLE allocation_events (
    seq INTEGER NOT NULL PRIMARY KEY,
    ts TEXT NOT NULL,
    op TEXT NOT NULL,
    pod_uid TEXT,
    container TEXT,
    resource TEXT NOT NULL,
    device_ids TEXT,
    released TEXT,
    hash BLOB NOT NULL,
    {_OPS_CHECK},
    CONSTRAINT ck_allocation_events_hash CHECK (length(hash) = 32)
)"""

_EVENT_DEVICES_0004 = """CREATE TABLE allocation_event_devices (
    seq INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    CONSTRAINT pk_allocation_event_devices PRIMARY KEY (seq, device_id),
    CONSTRAINT fk_allocation_event_devices_seq_allocation_events FOREIGN KEY(seq)
        REFERENCES allocation_events (seq) ON DELETE CASCADE
)
WITHOUT ROWID"""

_EVENT_DEVICES_0005 = """CREATE TABLE allocation_event_devices (
    seq INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    released BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_allocation_event_devices PRIMARY KEY (seq, device_id),
    CONSTRAINT fk_allocation_event_devices_seq_allocation_events FOREIGN KEY(seq)
        REFERENCES allocation_events (seq) ON DELETE CASCADE
)
WITHOUT ROWID"""

_LINKS = """CREATE TABLE history_chain_links (
    seq INTEGER NOT NULL,
    prev_hash BLOB NOT NULL,
    CONSTRAINT pk_history_chain_links PRIMARY KEY (seq),
    CONSTRAINT ck_history_chain_links_prev_hash CHECK (length(prev_hash) = 32)
)"""

_INDEXES = (
    "CREATE INDEX ix_allocation_events_ts ON allocation_events (ts)",
    "CREATE INDEX ix_allocation_events_key ON allocation_events "
    "(pod_uid, container, resource, seq)",
    "CREATE INDEX ix_allocation_event_devices_device_id ON allocation_event_devices "
    "(device_id, seq)",
)

_OLD_EVENTS = "_0005_allocation_events"
_OLD_DEVICES = "_0005_allocation_event_devices"

# The upgrade's read of the old log, one chunk at a time: each event, and for a replace or
# import the op and devices of the previous event of its key (a probe of the key index).
_READ_CHUNK = f"""
    SELECT e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids,
           p.op, p.device_ids
    FROM {_OLD_EVENTS} e
    LEFT JOIN {_OLD_EVENTS} p ON p.seq = CASE WHEN e.op IN ('replace', 'import') THEN (
        SELECT max(x.seq) FROM {_OLD_EVENTS} x
        WHERE x.pod_uid = e.pod_uid AND x.container = e.container
          AND x.resource = e.resource AND x.seq < e.seq) END
    WHERE e.seq > ?
    ORDER BY e.seq
    LIMIT {CHUNK}
"""
_INSERT_EVENT = """
    INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids,
                                   released, hash)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_INSERT_RELEASED = """
    INSERT INTO allocation_event_devices (seq, device_id, released) VALUES (?, ?, 1)
"""
_INSERT_LINK = "INSERT INTO history_chain_links (seq, prev_hash) VALUES (?, ?)"

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _devices(text: str | None) -> set[str]:
    """The devices a NUMA map's JSON names."""
    if text is None:
        return set()
    return {d for ids in json.loads(text).values() for d in ids or ()}


def _saved_schema(bind: sa.Connection) -> list[tuple[str, str, str]]:
    """Views and triggers that name the event tables: dropped before the rebuild, re-created
    from their stored text after it (views first)."""
    return [
        (str(kind), str(name), str(sql))
        for kind, name, sql in bind.exec_driver_sql(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger') "
            "AND sql IS NOT NULL AND sql LIKE '%allocation_event%' "
            "ORDER BY CASE type WHEN 'view' THEN 0 ELSE 1 END, rowid"
        ).fetchall()
    ]


def _set_aside(bind: sa.Connection) -> list[tuple[str, str, str]]:
    """Drop the dependent views and trigger, and rename the two tables aside (SQLite rewrites
    the child's foreign key to follow its parent's new name). Their indexes go with them: the
    upgrade's read of the previous event of a key probes the old key index."""
    saved = _saved_schema(bind)
    for kind, name, _sql in reversed(saved):
        op.execute(f"DROP {kind.upper()} {name}")
    op.execute(f"ALTER TABLE allocation_events RENAME TO {_OLD_EVENTS}")
    op.execute(f"ALTER TABLE allocation_event_devices RENAME TO {_OLD_DEVICES}")
    return saved


def _finish(saved: list[tuple[str, str, str]]) -> None:
    op.execute(f"DROP TABLE {_OLD_DEVICES}")
    op.execute(f"DROP TABLE {_OLD_EVENTS}")
    for ddl in _INDEXES:
        op.execute(ddl)
    for _kind, _name, sql in saved:
        op.execute(sql)


def upgrade() -> None:
    bind = op.get_bind()
    saved = _set_aside(bind)
    op.execute(_EVENTS_0005)
    op.execute(_EVENT_DEVICES_0005)
    op.execute(_LINKS)
    store_id = bind.exec_driver_sql(
        "SELECT value FROM store_meta WHERE key = 'store_id'"
    ).scalar_one_or_none()
    if store_id is None:  # pragma: no cover - revision 0003 gives every store one
        raise RuntimeError("the store has no store_id (revision 0003 makes one)")
    prev = chain.genesis(str(store_id))
    last = 0
    while True:
        rows = bind.exec_driver_sql(_READ_CHUNK, (last,)).fetchall()
        if not rows:
            break
        events: list[tuple[Any, ...]] = []
        released_rows: list[tuple[int, str]] = []
        links: list[tuple[int, bytes]] = []
        for seq, ts, op_, pod, container, resource, ids, prev_op, prev_ids in rows:
            if seq != last + 1:
                links.append((seq, prev))  # a gap pruned before the chain existed
            released = None
            if prev_op is not None and prev_op != "delete":
                gone = sorted(_devices(prev_ids) - _devices(ids))
                if gone:
                    released = _JSON.encode(gone)
                    released_rows.extend((seq, d) for d in gone)
            prev = chain.link(prev, seq, ts, op_, pod, container, resource, ids, released)
            events.append((seq, ts, op_, pod, container, resource, ids, released, prev))
            last = seq
        bind.exec_driver_sql(_INSERT_EVENT, events)
        if links:
            bind.exec_driver_sql(_INSERT_LINK, links)
        if released_rows:
            bind.exec_driver_sql(_INSERT_RELEASED, released_rows)
    floor = bind.exec_driver_sql(
        f"SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM store_meta WHERE key = '{FLOOR_KEY}'"
    ).scalar_one()
    if int(floor) > last:
        # The newest events were pruned: the next event chains from where the chain stands.
        bind.exec_driver_sql(_INSERT_LINK, (int(floor) + 1, prev))
    op.execute(
        f"INSERT INTO allocation_event_devices (seq, device_id, released) "
        f"SELECT seq, device_id, 0 FROM {_OLD_DEVICES}"
    )
    _finish(saved)


def downgrade() -> None:
    bind = op.get_bind()
    saved = _set_aside(bind)
    op.execute(_EVENTS_0004)
    op.execute(_EVENT_DEVICES_0004)
    op.execute(
        "INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids) "
        f"SELECT seq, ts, op, pod_uid, container, resource, device_ids FROM {_OLD_EVENTS}"
    )
    op.execute(
        "INSERT INTO allocation_event_devices (seq, device_id) "
        f"SELECT seq, device_id FROM {_OLD_DEVICES} WHERE released = 0"
    )
    op.execute("DROP TABLE history_chain_links")
    _finish(saved)
