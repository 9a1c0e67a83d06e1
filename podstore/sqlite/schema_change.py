"""``podstore migrate`` made safe: the target is checked first, the steps run one by one in one
transaction (for a progress bar), and a downgrade is first tried and rolled back to learn what
it drops, by comparing tables, columns and row counts (nothing here knows a podstore table).
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from podstore.errors import InvalidInputError, SchemaError
from podstore.sqlite import forking
from podstore.sqlite.connection import (
    ConnectOptions,
    connect,
    create_sqlalchemy_engine,
    database_url,
    table_names,
)
from podstore.sqlite.files import release_side_files
from podstore.sqlite.migrate import (
    BASE,
    HEAD_REVISION,
    alembic_config,
    current_revision,
    script_directory,
)
from podstore.sqlite.translate import translated_errors

if TYPE_CHECKING:
    import sqlalchemy

Direction = Literal["upgrade", "downgrade"]

#: A table that loses rows and has at most this many is named row by row (by primary key).
NAMED_ROWS = 1000


def revisions() -> list[str]:
    """Every known revision, oldest first (podstore's history is one line, no branches)."""
    return [s.revision for s in reversed(list(script_directory().walk_revisions()))]


def resolve(name: str) -> str:
    """The revision ``head``, ``base`` or an id means; InvalidInputError for another name."""
    known = revisions()
    if name in ("head", "heads"):
        return known[-1]
    if name == BASE or name in known:
        return name
    raise InvalidInputError(
        f"unknown revision {name!r} (known: {', '.join([BASE, *known, 'head'])})"
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """A checked schema change from ``current`` to ``target``; ``steps``: the revision reached
    after each step."""

    direction: Direction
    current: str
    target: str
    steps: tuple[str, ...]


def stored_revision(options: ConnectOptions) -> str:
    """The store's revision (BASE: empty), read without writing. Raises InvalidInputError for
    a missing file, SchemaError for an unknown revision or a database not podstore's."""
    with forking.activity():
        conn = connect(dataclasses.replace(options, readonly=True))
        try:
            rev = current_revision(conn)
        finally:
            conn.close()
            release_side_files(options.path)  # a read leaves no -wal or -shm behind
    if rev is None or rev == BASE:
        return BASE
    if rev != HEAD_REVISION and rev not in revisions():  # HEAD_REVISION: no Alembic needed
        raise SchemaError(
            f"the store is at revision {rev!r}, which this podstore does not know (it was "
            "written by a newer podstore); upgrade podstore instead"
        )
    return rev


def plan(options: ConnectOptions, direction: Direction, target_name: str) -> Plan:
    """Check a change to ``target_name`` against the store's revision (a missing file
    upgrades from BASE). Raises InvalidInputError for an unknown target or one on the wrong
    side, SchemaError for an unknown store revision.
    """
    target = resolve(target_name)
    if direction == "upgrade" and not os.path.exists(options.path):
        current = BASE
    else:
        current = stored_revision(options)
    chain = [BASE, *revisions()]
    here, there = chain.index(current), chain.index(target)
    if direction == "upgrade" and there < here:
        raise InvalidInputError(
            f"revision {target} is older than the store's revision {current}; "
            f"use `podstore migrate downgrade {target}`"
        )
    if direction == "downgrade" and there > here:
        raise InvalidInputError(
            f"revision {target} is newer than the store's revision {current}; "
            f"use `podstore migrate upgrade {target}`"
        )
    if direction == "upgrade":
        steps = tuple(chain[here + 1 : there + 1])
    else:
        steps = tuple(reversed(chain[there:here]))
    return Plan(direction, current, target, steps)


OnStep = Callable[[int, str], None]


def run(options: ConnectOptions, change: Plan, on_step: OnStep | None = None) -> None:
    """Apply ``change`` step by step in one transaction (all of it or none); ``on_step(i,
    revision)`` is called after step i (1-based)."""
    _steps(options, change, on_step, dry_run=False)


@dataclass(frozen=True, slots=True)
class Loss:
    """What a downgrade drops: a ``table``, ``rows`` of a kept table (``keys`` when few), a
    ``column`` or a ``view``."""

    kind: Literal["table", "rows", "column", "view"]
    name: str
    count: int = 0
    keys: tuple[str, ...] = ()

    @property
    def drops_data(self) -> bool:
        return self.kind != "view" and self.count > 0

    def __str__(self) -> str:
        if self.kind == "table":
            return f"table {self.name} ({_rows(self.count)})"
        if self.kind == "rows":
            named = f": {', '.join(self.keys)}" if self.keys else ""
            return f"{_rows(self.count)} of table {self.name}{named}"
        if self.kind == "column":
            return f"column {self.name} ({self.count} non-null values)"
        return f"view {self.name}"


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


def losses(options: ConnectOptions, change: Plan) -> list[Loss]:
    """What ``change`` would drop (applied in a transaction rolled back)."""
    return _steps(options, change, None, dry_run=True)


class _RollBack(Exception):
    """Raised inside the dry run's transaction to roll it back."""


@dataclass(slots=True)
class _Table:
    rows: int
    columns: dict[str, int]  # column → non-null values
    keys: set[object] | None  # single-column primary key values, when the table is small
    key_column: str | None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _snapshot(conn: sqlalchemy.Connection) -> tuple[dict[str, _Table], set[str]]:
    raw = conn.connection.dbapi_connection
    assert isinstance(raw, sqlite3.Connection)
    tables: dict[str, _Table] = {}
    for name in sorted(table_names(raw) - {"alembic_version"}):
        ident = _quoted(name)
        info = raw.execute(f"PRAGMA table_info({ident})").fetchall()
        columns = [str(r[1]) for r in info]
        pk = [str(r[1]) for r in info if int(r[5]) > 0]
        counted = "".join(f", count({_quoted(c)})" for c in columns)
        rows, *counts = raw.execute(f"SELECT count(*){counted} FROM {ident}").fetchone()
        key_column = pk[0] if len(pk) == 1 else None
        keys = None
        if key_column is not None and rows <= NAMED_ROWS:
            keys = {r[0] for r in raw.execute(f"SELECT {_quoted(key_column)} FROM {ident}")}
        tables[name] = _Table(rows, dict(zip(columns, counts, strict=True)), keys, key_column)
    views = {str(r[0]) for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    return tables, views


def _key_order(value: object) -> tuple[int, float, str]:
    """Numbers (seqs, ids) in numeric order, then text in code point order."""
    if isinstance(value, int | float):
        return (0, value, "")
    return (1, 0.0, str(value))


def _diff(
    before: tuple[dict[str, _Table], set[str]], after: tuple[dict[str, _Table], set[str]]
) -> list[Loss]:
    out: list[Loss] = []
    (old, old_views), (new, new_views) = before, after
    for name, table in sorted(old.items()):
        kept = new.get(name)
        if kept is None:
            out.append(Loss("table", name, table.rows))
            continue
        for column, values in table.columns.items():
            if column not in kept.columns:
                out.append(Loss("column", f"{name}.{column}", values))
        if kept.rows < table.rows:
            gone: tuple[str, ...] = ()
            if table.keys is not None and kept.keys is not None:
                lost = sorted(table.keys - kept.keys, key=_key_order)
                gone = tuple(f"{table.key_column}={k}" for k in lost)
            out.append(Loss("rows", name, table.rows - kept.rows, gone))
    out.extend(Loss("view", v) for v in sorted(old_views - new_views))
    return out


def _steps(
    options: ConnectOptions, change: Plan, on_step: OnStep | None, *, dry_run: bool
) -> list[Loss]:
    from alembic import command

    apply = command.upgrade if change.direction == "upgrade" else command.downgrade
    engine = create_sqlalchemy_engine(database_url(options.path), options)
    found: list[Loss] = []
    try:
        with forking.activity(), translated_errors():
            try:
                with engine.begin() as connection:
                    before = _snapshot(connection) if dry_run else None
                    cfg = alembic_config(connection)
                    for i, step in enumerate(change.steps, start=1):
                        apply(cfg, step)
                        if on_step is not None:
                            on_step(i, step)
                    if before is not None:
                        found = _diff(before, _snapshot(connection))
                        raise _RollBack
            except _RollBack:
                pass
    finally:
        engine.dispose()
    return found
