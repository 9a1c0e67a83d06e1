"""Read-only SQL for audits (``PodStore.query``, ``podstore sql``) behind three independent
locks (docs/sql.md): ``mode=ro``, ``PRAGMA query_only``, and an authorizer allowing only reads
(ATTACH is denied: it would create a file, and ``VACUUM INTO`` writes one even read-only).

Eponymous virtual tables (``json_each``) announce themselves as an UPDATE of ``sqlite_master``;
that is allowed (a real one still fails: ``writable_schema`` is a PRAGMA write, refused).

The time limit counts only SQLite's work (a progress handler), not the caller's time between
rows, so a slow reader of a pipe is never cut off. Rows are fetched in pages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from podstore.errors import InvalidInputError, PodStoreError, QueryLimitError, ReadOnlyStoreError
from podstore.sqlite import forking
from podstore.sqlite.connection import ConnectOptions, connect
from podstore.sqlite.translate import translate, translated_errors
from podstore.types import QueryResult

T = TypeVar("T")
R = TypeVar("R")

Params = Sequence[Any] | Mapping[str, Any] | None

# Rows per fetch: small Python overhead per row, a page of wide rows a few hundred kB.
PAGE_ROWS = 256
#: The largest string or blob a guarded statement may build (SQLite's default: 1 GB). Stored
#: values are far smaller; a runaway ``s || s`` doubles in one step, too fast for a time limit.
MAX_VALUE_BYTES = 32 << 20
# VM instructions between progress calls (a few hundred µs): timely, and costs nothing measurable.
_PROGRESS_STEPS = 10_000

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


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """``timeout``: seconds of SQLite's work; ``max_rows``: rows per statement (None: no
    limit). Raises InvalidInputError for a bad value."""

    timeout: float | None = None
    max_rows: int | None = None

    def __post_init__(self) -> None:
        t = self.timeout
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0
        ):
            raise InvalidInputError(f"timeout: expected positive seconds or None, got {t!r}")
        m = self.max_rows
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise InvalidInputError(f"max_rows: expected an int >= 0 or None, got {m!r}")


class Guarded(forking.Participant):
    """One guarded read-only connection with its limits; ``snapshot=True``: one read
    transaction (begun before the authorizer refuses transactions). Raises what ``connect``
    raises."""

    def __init__(self, options: ConnectOptions, limits: Limits, *, snapshot: bool) -> None:
        self.limits = limits
        self._spent = 0.0
        self._entered: float | None = None
        self._interrupted = False
        self._forked = False
        self._pid = os.getpid()
        # The thread inside a call now. Not a lock: an interrupt between taking it and the try
        # that gives it back would leave the reader refusing every later call.
        self._user: int | None = None
        with forking.activity():  # a fork waits, so its child has this one to close
            self.conn: sqlite3.Connection | None = self._open(options, limits, snapshot=snapshot)
            forking.register(self)

    def _open(
        self, options: ConnectOptions, limits: Limits, *, snapshot: bool
    ) -> sqlite3.Connection:
        conn = connect(dataclasses.replace(options, readonly=True))
        try:
            with translated_errors():
                conn.execute("PRAGMA query_only = ON")
                if snapshot:
                    conn.execute("BEGIN")
            conn.set_authorizer(_authorize)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            if limits.timeout is not None:
                conn.set_progress_handler(self._progress, _PROGRESS_STEPS)
        except BaseException:
            conn.close()
            raise
        return conn

    # fork (sqlite/forking.py): waits for a statement or fetch in flight, not for an open
    # reader; the child closes its copy (it only read: that releases nothing of the parent's).
    def fork_child(self, thread: int) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            self._forked = True
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _closed_error(self) -> PodStoreError:
        if self._forked:
            return PodStoreError(
                "this reader was opened before os.fork(): its connection belongs to the parent "
                "process; open a new reader in this one"
            )
        return PodStoreError("the reader is closed")

    def _progress(self) -> int:
        timeout = self.limits.timeout
        if self._entered is None or timeout is None:
            return 0
        if self._spent + (time.monotonic() - self._entered) > timeout:
            self._interrupted = True
            return 1  # SQLite stops the statement with SQLITE_INTERRUPT
        return 0

    def call(self, fn: Callable[[], R]) -> R:
        """Run ``fn`` (into SQLite), timed against the limit, errors made podstore's."""
        if self.conn is None:
            raise self._closed_error()
        me, user = threading.get_ident(), self._user
        if user is not None and user != me:
            raise PodStoreError(
                "this reader is in use by another thread: a reader (and its streams) is one "
                "snapshot for one thread at a time; open a reader per thread"
            )
        self._user = me
        try:
            with forking.activity():
                self._entered = entered = time.monotonic()
                try:
                    return fn()
                except (sqlite3.Error, sqlite3.Warning) as exc:
                    raise self._error(exc) from None
                finally:
                    self._spent += time.monotonic() - entered
                    self._entered = None
        finally:
            self._user = None

    def _error(self, exc: sqlite3.Error | sqlite3.Warning) -> PodStoreError:
        text = str(exc)
        name = str(getattr(exc, "sqlite_errorname", ""))
        if self._interrupted or name == "SQLITE_INTERRUPT":
            self._interrupted = False
            return QueryLimitError(
                "timeout",
                f"the statement was stopped after {self.limits.timeout:g} s of work (its time "
                "limit); nothing was changed",
            )
        if name == "SQLITE_TOOBIG":
            return QueryLimitError(
                "value_size",
                f"the statement built a value larger than {MAX_VALUE_BYTES >> 20} MiB (the "
                "largest a read-only query may build) and was stopped; nothing was changed",
            )
        if name == "SQLITE_AUTH" or "not authorized" in text or name.startswith("SQLITE_READONLY"):
            return ReadOnlyStoreError(
                f"refused: this connection is read-only and allows only reading ({text})"
            )
        mapped = translate(exc)
        # Two statements, wrong bindings, bad SQL (syntax, no such table) …
        bad_sql = isinstance(exc, (sqlite3.Warning, sqlite3.ProgrammingError)) or (
            isinstance(exc, sqlite3.OperationalError) and name in ("", "SQLITE_ERROR")
        )
        if bad_sql or mapped is None or type(mapped) is PodStoreError:
            return InvalidInputError(f"sql: {text}")
        return mapped

    def rows(self, sql: str, params: Params = None) -> RowStream[tuple[Any, ...]]:
        """Start one statement; its rows stream from the returned RowStream. Raises
        ReadOnlyStoreError (refused), InvalidInputError (bad SQL), QueryLimitError."""
        if not isinstance(sql, str):
            raise InvalidInputError(f"sql: expected str, got {type(sql).__name__}")
        conn = self.conn
        if conn is None:
            raise self._closed_error()
        cur = self.call(lambda: conn.execute(sql, params if params is not None else ()))
        return RowStream(self, cur, tuple)

    def close(self) -> None:
        # Inside the activity: a fork in between would leave the child a connection to close.
        with forking.activity():
            conn, self.conn = self.conn, None
            if conn is not None:
                conn.close()

    def __del__(self) -> None:
        # A sqlite3 connection lives in a cycle with its statement cache until the collector
        # runs; a forked child would meanwhile keep SQLite's records of the parent's locks.
        if getattr(self, "conn", None) is None:
            return
        try:
            if os.getpid() != self._pid:
                # A forked child before its clean-up: the fork waited, so it was idle.
                self.fork_child(0)
            else:
                self.close()
        except Exception:  # pragma: no cover - at interpreter shutdown anything may be gone
            pass


class RowStream(Generic[T]):
    """The rows of one statement (``columns``: their names), fetched a page at a time;
    iterate once, ``close()`` or ``with`` ends it early. Iteration raises QueryLimitError
    past a limit (rows returned stay valid).
    """

    def __init__(
        self,
        guarded: Guarded,
        cursor: sqlite3.Cursor,
        convert: Callable[[tuple[Any, ...]], T],
        on_close: list[Callable[[], None]] | None = None,
    ) -> None:
        self._guarded = guarded
        self._cursor: sqlite3.Cursor | None = cursor
        self._convert = convert
        self._on_close = on_close or []
        self._page: Iterator[tuple[Any, ...]] = iter(())
        self._count = 0
        self.columns: tuple[str, ...] = tuple(d[0] for d in cursor.description or ())

    def mapped(self, convert: Callable[[tuple[Any, ...]], R]) -> RowStream[R]:
        """The same stream with each row passed through ``convert`` (before iteration)."""
        assert self._cursor is not None and self._count == 0
        stream: RowStream[R] = RowStream(self._guarded, self._cursor, convert, self._on_close)
        self._cursor = None
        self._on_close = []
        return stream

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once when the stream is closed or exhausted."""
        self._on_close.append(fn)

    def __iter__(self) -> RowStream[T]:
        return self

    def __next__(self) -> T:
        row = next(self._page, None)
        if row is None:
            cursor = self._cursor
            if cursor is None:
                raise StopIteration
            try:
                page = self._guarded.call(lambda: cursor.fetchmany(PAGE_ROWS))
            except BaseException:
                self.close()
                raise
            if not page:
                self.close()
                raise StopIteration
            self._page = iter(page)
            row = next(self._page)
        self._count += 1
        max_rows = self._guarded.limits.max_rows
        if max_rows is not None and self._count > max_rows:
            self.close()
            raise QueryLimitError(
                "max_rows", f"the statement returned more than {max_rows} rows (its row limit)"
            )
        return self._convert(row)

    def close(self) -> None:
        """Stop reading (the statement is reset; later iteration ends at once)."""
        cursor, self._cursor = self._cursor, None
        self._page = iter(())
        if cursor is not None:
            # Closing a cursor has nothing to undo; an error here would hide the real one.
            with forking.activity(), contextlib.suppress(sqlite3.Error):
                cursor.close()
        callbacks, self._on_close = self._on_close, []
        for fn in callbacks:
            fn()

    def __enter__(self) -> RowStream[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run(
    options: ConnectOptions, sql: str, params: Params = None, limits: Limits | None = None
) -> QueryResult:
    """Every row of one statement on a new guarded connection (``PodStore.query``); raises as
    :meth:`Guarded.rows`."""
    guarded = Guarded(options, limits or Limits(), snapshot=False)
    try:
        with guarded.rows(sql, params) as rows:
            return QueryResult(rows.columns, list(rows))
    finally:
        guarded.close()
