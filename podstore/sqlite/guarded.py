"""Read-only SQL for audits (``PodStore.query`` and ``podstore sql``): any write is refused.

Three independent locks, so that no single mistake opens a way to write:

1. the file is opened ``mode=ro`` (SQLite refuses to write it at all);
2. ``PRAGMA query_only = ON`` (SQLite refuses any statement that would change a database);
3. an authorizer that allows only reading: SELECT, reads of tables and views, functions (but
   ``load_extension``), recursive CTEs and PRAGMAs that only read. It denies ATTACH and DETACH
   (``ATTACH`` would create a file, and ``VACUUM INTO`` writes a new one, even on a read-only
   connection), every INSERT/UPDATE/DELETE/CREATE/DROP/ALTER, transactions and savepoints, and
   every PRAGMA given a value (``PRAGMA query_only = OFF`` included) other than the few that
   take an argument to read something (``table_info(t)``, ...).

Eponymous virtual tables (``json_each``, ``pragma_table_info``) announce themselves to the
authorizer as an UPDATE of ``sqlite_master`` while SQLite sets them up; that one action is
allowed (a real ``UPDATE sqlite_master`` still fails: the schema table is not writable without
``writable_schema``, a PRAGMA the authorizer refuses).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from podstore.errors import InvalidInputError, ReadOnlyStoreError
from podstore.sqlite.connection import ConnectOptions, connect
from podstore.sqlite.translate import translated_errors
from podstore.types import QueryResult

_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master"})
# PRAGMAs that read something named by their argument.
_PRAGMAS_WITH_READ_ARGUMENT = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
    }
)
# PRAGMAs without a value that still change something.
_PRAGMAS_THAT_WRITE = frozenset(
    {"wal_checkpoint", "optimize", "incremental_vacuum", "shrink_memory", "analysis_limit"}
)
_DENIED_FUNCTIONS = frozenset({"load_extension"})


def _authorize(
    action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None
) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        name = (arg2 or "").lower()
        return sqlite3.SQLITE_DENY if name in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _PRAGMAS_THAT_WRITE:
            return sqlite3.SQLITE_DENY
        if arg2 is None or name in _PRAGMAS_WITH_READ_ARGUMENT:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in _SCHEMA_TABLES:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_guarded(options: ConnectOptions) -> sqlite3.Connection:
    """A connection to the store's file that can only read (see the module docstring)."""
    conn = connect(dataclasses.replace(options, readonly=True))
    try:
        with translated_errors():
            conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorize)
    except BaseException:
        conn.close()
        raise
    return conn


def run(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> QueryResult:
    """Run one statement on a guarded connection and fetch every row.

    Raises ReadOnlyStoreError for a statement that would write (or is otherwise refused),
    InvalidInputError for bad SQL or parameters.
    """
    if not isinstance(sql, str):
        raise InvalidInputError(f"sql: expected str, got {type(sql).__name__}")
    try:
        cur = conn.execute(sql, params if params is not None else ())
        rows = cur.fetchall()
    except sqlite3.DatabaseError as exc:
        name = str(getattr(exc, "sqlite_errorname", ""))
        text = str(exc)
        if name == "SQLITE_AUTH" or "not authorized" in text or name.startswith("SQLITE_READONLY"):
            raise ReadOnlyStoreError(
                f"refused: this connection is read-only and allows only reading ({text})"
            ) from None
        if isinstance(exc, (sqlite3.OperationalError, sqlite3.ProgrammingError)):
            raise InvalidInputError(f"sql: {text}") from None
        with translated_errors():
            raise
    except (sqlite3.Error, sqlite3.Warning) as exc:  # e.g. two statements at once
        raise InvalidInputError(f"sql: {exc}") from None
    columns = tuple(d[0] for d in cur.description or ())
    return QueryResult(columns, [tuple(r) for r in rows])
