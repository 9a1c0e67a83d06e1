"""Lean entries: the decoded response as JSON, device spans shared with the history, no ts index.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05

An insert wrote 16–18 pages at revision 0005, a hand-written lean store 5–7
(docs/performance.md). This revision stores what the contract of docs/sql.md shows once, and
turns the relations that repeated it into views with the same names and columns:

- ``allocations.response`` (TEXT): the decoded ContainerAllocateResponse as canonical JSON
  (``podstore/storage/responses.py``, "The JSON"); the five ``response_*`` tables become views
  over it (rows of one allocation: one page instead of two or three).
- ``allocation_device_spans``: an entry's device lists and their history in one table
  (``podstore/storage/spans.py``). ``allocation_devices`` becomes the view of the open spans,
  ``allocation_event_devices`` the view of what the spans and ``event_device_rows`` say each
  event names (an insert writes each device once: one random index page per device, not two).
- ``event_device_rows``: the old ``allocation_event_devices`` rows, kept for the events written
  before this revision (their spans are not known: the current devices become spans with
  ``since_seq`` 0, which names no event), and for events written later without spans
  (registered devices).
- ``ix_allocation_events_ts`` goes: seq order is time order, so a time is found by a binary
  search over seq (one page less per insert).
- ``v_run_options`` and ``v_run_option_conflicts`` read the JSON directly (the same rows).

Every view and table keeps its name, columns and answers; ``podstore verify`` checks that the
spans and rows name exactly what the events' JSON does. Downgrading rebuilds the 0005 tables
from the views' answers (the same rows), drops the new ones and the column.

The DDL, the view SQL and the JSON encoding are spelled out here, frozen (0005's view text is
0002's, read from that revision's file).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Allocations converted per round (their JSON built, written; Python holds one chunk).
CHUNK = 5000

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

# ---- frozen DDL ------------------------------------------------------------------------------

_SPANS = """CREATE TABLE allocation_device_spans (
    allocation_id INTEGER NOT NULL,
    since_seq INTEGER NOT NULL,
    numa_node BIGINT NOT NULL,
    position INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    until_seq INTEGER,
    until_released BOOLEAN,
    CONSTRAINT pk_allocation_device_spans PRIMARY KEY (allocation_id, since_seq, numa_node,
        position)
)
WITHOUT ROWID"""

_EVENT_DEVICE_ROWS = """CREATE TABLE event_device_rows (
    seq INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    released BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_event_device_rows PRIMARY KEY (seq, device_id),
    CONSTRAINT fk_event_device_rows_seq_allocation_events FOREIGN KEY(seq)
        REFERENCES allocation_events (seq) ON DELETE CASCADE
)
WITHOUT ROWID"""

_INDEXES = (
    "CREATE INDEX ix_allocation_device_spans_device_id ON allocation_device_spans "
    "(device_id, until_seq)",
    "CREATE INDEX ix_event_device_rows_device_id ON event_device_rows (device_id, seq)",
)

# The 0005 relations, as revisions 0004 and 0005 created them.
_FK_ALLOCATION = "FOREIGN KEY(allocation_id) REFERENCES allocations (id) ON DELETE CASCADE"


def _old_response(name: str, columns: str) -> str:
    return f"""CREATE TABLE {name} (
    allocation_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    {columns},
    CONSTRAINT pk_{name} PRIMARY KEY (allocation_id, position),
    CONSTRAINT fk_{name}_allocation_id_allocations {_FK_ALLOCATION}
)
WITHOUT ROWID"""


# (name, JSON member, 0005 columns, 0005 DDL), in the JSON's member order.
_RESPONSES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "response_envs",
        "envs",
        ("name", "value"),
        _old_response("response_envs", "name TEXT NOT NULL,\n    value TEXT NOT NULL"),
    ),
    (
        "response_mounts",
        "mounts",
        ("container_path", "host_path", "read_only"),
        _old_response(
            "response_mounts",
            "container_path TEXT NOT NULL,\n    host_path TEXT NOT NULL,\n"
            "    read_only BOOLEAN NOT NULL",
        ),
    ),
    (
        "response_devices",
        "devices",
        ("container_path", "host_path", "permissions"),
        _old_response(
            "response_devices",
            "container_path TEXT NOT NULL,\n    host_path TEXT NOT NULL,\n"
            "    permissions TEXT NOT NULL",
        ),
    ),
    (
        "response_annotations",
        "annotations",
        ("name", "value"),
        _old_response("response_annotations", "name TEXT NOT NULL,\n    value TEXT NOT NULL"),
    ),
    (
        "response_cdi_devices",
        "cdi_devices",
        ("name",),
        _old_response("response_cdi_devices", "name TEXT NOT NULL"),
    ),
)

_OLD_DEVICES = f"""CREATE TABLE allocation_devices (
    allocation_id INTEGER NOT NULL,
    numa_node BIGINT NOT NULL,
    position INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    CONSTRAINT pk_allocation_devices PRIMARY KEY (allocation_id, numa_node, position),
    CONSTRAINT fk_allocation_devices_allocation_id_allocations {_FK_ALLOCATION}
)
WITHOUT ROWID"""

_OLD_EVENT_DEVICES = """CREATE TABLE allocation_event_devices (
    seq INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    released BOOLEAN DEFAULT 0 NOT NULL,
    CONSTRAINT pk_allocation_event_devices PRIMARY KEY (seq, device_id),
    CONSTRAINT fk_allocation_event_devices_seq_allocation_events FOREIGN KEY(seq)
        REFERENCES allocation_events (seq) ON DELETE CASCADE
)
WITHOUT ROWID"""

_OLD_INDEXES = (
    "CREATE INDEX ix_allocation_devices_device_id ON allocation_devices (device_id)",
    "CREATE INDEX ix_allocation_event_devices_device_id ON allocation_event_devices "
    "(device_id, seq)",
    "CREATE INDEX ix_allocation_events_ts ON allocation_events (ts)",
)

# ---- frozen view SQL (a copy of podstore/storage/sql/views.py as of this revision) -----------

_V_ALLOCATION_DEVICES = """
CREATE VIEW allocation_devices AS
SELECT allocation_id, numa_node, position, device_id
FROM allocation_device_spans
WHERE until_seq IS NULL
"""

_EVENT_DEVICE_PAIRS = """
    SELECT since_seq AS seq, device_id, 0 AS released FROM allocation_device_spans
    UNION ALL
    SELECT until_seq, device_id, until_released FROM allocation_device_spans
    WHERE until_released IS NOT NULL
    UNION ALL
    SELECT seq, device_id, released FROM event_device_rows
"""
_V_ALLOCATION_EVENT_DEVICES = f"""
CREATE VIEW allocation_event_devices AS
SELECT n.seq AS seq, n.device_id AS device_id, min(n.released) AS released
FROM ({_EVENT_DEVICE_PAIRS}) n
WHERE EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = n.seq)
GROUP BY n.seq, n.device_id
"""


def _response_view(name: str, section: str, columns: str) -> str:
    return f"""
CREATE VIEW {name} AS
SELECT a.id AS allocation_id, x.key AS position, {columns}
FROM allocations a, json_each(a.response, '$.{section}') x
"""


_V_RESPONSES = (
    _response_view(
        "response_envs",
        "envs",
        "json_extract(x.value, '$[0]') AS name, json_extract(x.value, '$[1]') AS value",
    ),
    _response_view(
        "response_mounts",
        "mounts",
        "json_extract(x.value, '$[0]') AS container_path, json_extract(x.value, '$[1]') AS "
        "host_path, json_extract(x.value, '$[2]') AS read_only",
    ),
    _response_view(
        "response_devices",
        "devices",
        "json_extract(x.value, '$[0]') AS container_path, json_extract(x.value, '$[1]') AS "
        "host_path, json_extract(x.value, '$[2]') AS permissions",
    ),
    _response_view(
        "response_annotations",
        "annotations",
        "json_extract(x.value, '$[0]') AS name, json_extract(x.value, '$[1]') AS value",
    ),
    _response_view("response_cdi_devices", "cdi_devices", "x.value AS name"),
)


def _each(section: str) -> str:
    return f"FROM allocations a, json_each(a.response, '$.{section}') x"


_OPTIONS = f"""
    options (container_id, resource, kind_order, kind, position, name, value, permissions,
             read_only) AS (
        SELECT a.container_id, a.resource, 1, 'env', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), NULL, NULL
        {_each("envs")}
        UNION ALL
        SELECT a.container_id, a.resource, 2, 'device', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), json_extract(x.value, '$[2]'), NULL
        {_each("devices")}
        UNION ALL
        SELECT a.container_id, a.resource, 3, 'mount', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), NULL, json_extract(x.value, '$[2]')
        {_each("mounts")}
        UNION ALL
        SELECT a.container_id, a.resource, 4, 'annotation', x.key,
               json_extract(x.value, '$[0]'), json_extract(x.value, '$[1]'), NULL, NULL
        {_each("annotations")}
        UNION ALL
        SELECT a.container_id, a.resource, 5, 'cdi', x.key, x.value, NULL, NULL, NULL
        {_each("cdi_devices")}
    )"""

_RANKED = """
    ranked AS (
        SELECT o.*,
               row_number() OVER w AS rn,
               first_value(o.value) OVER w AS kept_value,
               first_value(o.resource) OVER w AS kept_resource
        FROM options o
        WINDOW w AS (PARTITION BY o.container_id, o.kind_order, o.name
                     ORDER BY o.resource, o.position)
    )"""

_V_RUN_OPTIONS = (
    """
CREATE VIEW v_run_options AS
WITH"""
    + _OPTIONS
    + ","
    + _RANKED
    + """
SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind,
       row_number() OVER (PARTITION BY r.container_id, r.kind_order
                          ORDER BY r.resource, r.position) AS ordinal,
       r.name AS name, r.value AS value, r.permissions AS permissions,
       r.read_only AS read_only, r.resource AS resource
FROM ranked r
JOIN containers c ON c.id = r.container_id
JOIN pods p ON p.id = c.pod_id
WHERE r.rn = 1
"""
)

_V_RUN_OPTION_CONFLICTS = (
    """
CREATE VIEW v_run_option_conflicts AS
WITH"""
    + _OPTIONS
    + ","
    + _RANKED
    + """
SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind, r.name AS name,
       r.kept_value AS kept_value, r.kept_resource AS kept_resource,
       r.value AS dropped_value, r.resource AS dropped_resource
FROM ranked r
JOIN containers c ON c.id = r.container_id
JOIN pods p ON p.id = c.pod_id
WHERE r.rn > 1 AND r.value IS NOT r.kept_value
"""
)

#: The run-option views this revision replaces (their 0005 text is 0002's).
_RUN_OPTION_VIEWS = ("v_run_options", "v_run_option_conflicts")


def _revision_0002() -> ModuleType:
    """Revision 0002's module, for the frozen text of the views 0005 had."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "0002_audit.py")
    spec = importlib.util.spec_from_file_location("podstore_migration_0002", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the JSON (a frozen copy of storage/responses.to_json) -----------------------------------


def _to_json(sections: dict[str, list[tuple[Any, ...]]]) -> str | None:
    doc: dict[str, Any] = {}
    for _name, member, columns, _ddl in _RESPONSES:
        rows = sections.get(member)
        if not rows:
            continue
        if member == "mounts":
            doc[member] = [(c, h, bool(ro)) for c, h, ro in rows]
        elif len(columns) == 1:
            doc[member] = [r[0] for r in rows]
        else:
            doc[member] = rows
    return _JSON.encode(doc) if doc else None


# ---- upgrade ---------------------------------------------------------------------------------


def _views(bind: sa.Connection) -> list[tuple[str, str]]:
    """Every view, in creation order, with its stored text."""
    return [
        (str(name), str(sql))
        for name, sql in bind.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY rowid"
        ).fetchall()
    ]


def _chunks(bind: sa.Connection) -> Iterator[tuple[int, int]]:
    """(first, last) allocation ids of each chunk of CHUNK allocations, in id order."""
    after = 0
    while True:
        ids = [
            int(r[0])
            for r in bind.exec_driver_sql(
                "SELECT id FROM allocations WHERE id > ? ORDER BY id LIMIT ?", (after, CHUNK)
            ).fetchall()
        ]
        if not ids:
            return
        yield ids[0], ids[-1]
        after = ids[-1]


def _fill_json(bind: sa.Connection) -> None:
    """allocations.response from the decoded rows, a chunk of allocations at a time."""
    for first, last in _chunks(bind):
        sections: dict[int, dict[str, list[tuple[Any, ...]]]] = {}
        for name, member, columns, _ddl in _RESPONSES:
            for row in bind.exec_driver_sql(
                f"SELECT allocation_id, {', '.join(columns)} FROM {name} "
                "WHERE allocation_id BETWEEN ? AND ? ORDER BY allocation_id, position",
                (first, last),
            ).fetchall():
                sections.setdefault(int(row[0]), {}).setdefault(member, []).append(tuple(row[1:]))
        updates = [(_to_json(s), aid) for aid, s in sections.items()]
        if updates:
            bind.exec_driver_sql("UPDATE allocations SET response = ? WHERE id = ?", updates)


def upgrade() -> None:
    bind = op.get_bind()
    views = _views(bind)
    for name, _sql in reversed(views):
        op.execute(f"DROP VIEW {name}")
    op.execute("ALTER TABLE allocations ADD COLUMN response TEXT")
    _fill_json(bind)
    op.execute(_SPANS)
    op.execute(
        "INSERT INTO allocation_device_spans (allocation_id, since_seq, numa_node, position, "
        "device_id) SELECT allocation_id, 0, numa_node, position, device_id "
        "FROM allocation_devices"
    )
    op.execute(_EVENT_DEVICE_ROWS)
    op.execute(
        "INSERT INTO event_device_rows (seq, device_id, released) "
        "SELECT seq, device_id, released FROM allocation_event_devices"
    )
    # Children of allocations and of allocation_events only: dropping them cascades nothing.
    op.execute("DROP TABLE allocation_event_devices")
    op.execute("DROP TABLE allocation_devices")
    for name, _member, _columns, _ddl in _RESPONSES:
        op.execute(f"DROP TABLE {name}")
    op.execute("DROP INDEX ix_allocation_events_ts")
    for ddl in _INDEXES:
        op.execute(ddl)
    op.execute(_V_ALLOCATION_DEVICES)
    op.execute(_V_ALLOCATION_EVENT_DEVICES)
    for ddl in _V_RESPONSES:
        op.execute(ddl)
    replaced = {"v_run_options": _V_RUN_OPTIONS, "v_run_option_conflicts": _V_RUN_OPTION_CONFLICTS}
    for name, sql in views:
        op.execute(replaced.get(name, sql))


# ---- downgrade -------------------------------------------------------------------------------


def _fill_responses(bind: sa.Connection) -> None:
    """The five 0005 tables from the JSON, a chunk of allocations at a time."""
    for first, last in _chunks(bind):
        rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name, *_ in _RESPONSES}
        for aid, text in bind.exec_driver_sql(
            "SELECT id, response FROM allocations "
            "WHERE id BETWEEN ? AND ? AND response IS NOT NULL ORDER BY id",
            (first, last),
        ).fetchall():
            doc = json.loads(text)
            for name, member, columns, _ddl in _RESPONSES:
                for pos, value in enumerate(doc.get(member, ())):
                    values = (value,) if len(columns) == 1 else tuple(value)
                    rows[name].append((int(aid), pos, *values))
        for name, _member, columns, _ddl in _RESPONSES:
            if rows[name]:
                marks = ", ".join("?" * (len(columns) + 2))
                bind.exec_driver_sql(
                    f"INSERT INTO {name} (allocation_id, position, {', '.join(columns)}) "
                    f"VALUES ({marks})",
                    rows[name],
                )


def downgrade() -> None:
    bind = op.get_bind()
    views = _views(bind)
    for name, _sql in reversed(views):
        op.execute(f"DROP VIEW {name}")
    for _name, _member, _columns, ddl in _RESPONSES:
        op.execute(ddl)
    _fill_responses(bind)
    op.execute(_OLD_DEVICES)
    op.execute(
        "INSERT INTO allocation_devices (allocation_id, numa_node, position, device_id) "
        "SELECT allocation_id, numa_node, position, device_id FROM allocation_device_spans "
        "WHERE until_seq IS NULL"
    )
    op.execute(_OLD_EVENT_DEVICES)
    op.execute(
        "INSERT INTO allocation_event_devices (seq, device_id, released) "
        f"SELECT n.seq, n.device_id, min(n.released) FROM ({_EVENT_DEVICE_PAIRS}) n "
        "WHERE EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = n.seq) "
        "GROUP BY n.seq, n.device_id"
    )
    op.execute("DROP TABLE event_device_rows")
    op.execute("DROP TABLE allocation_device_spans")
    op.execute("ALTER TABLE allocations DROP COLUMN response")
    for ddl in _OLD_INDEXES:
        op.execute(ddl)
    old = _revision_0002()
    frozen = {
        "v_run_options": old.V_RUN_OPTIONS,
        "v_run_option_conflicts": old.V_RUN_OPTION_CONFLICTS,
    }
    ours = {"allocation_devices", "allocation_event_devices", *(n for n, *_ in _RESPONSES)}
    for name, sql in views:
        if name not in ours:
            op.execute(frozen.get(name, sql))
