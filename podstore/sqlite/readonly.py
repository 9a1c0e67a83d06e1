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

Limits (:class:`Limits`): a time limit counts only the time SQLite spends computing rows —
enforced by a progress handler that interrupts the statement — not the time the caller takes
between rows, so a slow reader of a pipe is never cut off; a row limit stops a statement at
its first row past the limit; and no statement may build a string or blob larger than
:data:`MAX_VALUE_BYTES`. Each raises QueryLimitError. Rows are fetched in pages, so a
caller that streams holds one page at a time, however large the answer.
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

# Rows fetched per call into SQLite: large enough that the Python overhead per row is small,
# small enough that a page of wide rows stays a few hundred kB.
PAGE_ROWS = 256
#: The largest string or blob a guarded statement may build (SQLITE_LIMIT_LENGTH; SQLite's own
#: default is 1 GB). Stored values are far smaller — a response is a few hundred bytes, the
#: history's largest row a registered-device list — while a runaway ``s || s`` doubles its
#: value in a single step, too fast for any time limit to catch.
MAX_VALUE_BYTES = 32 << 20
# The progress handler runs every this many virtual-machine instructions (a few hundred µs):
# fine enough for a timely stop, coarse enough to cost nothing measurable.
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
    """How long a guarded connection's statements may run and how many rows one may return.

    ``timeout``: seconds of SQLite's own work (None: no limit). ``max_rows``: rows one
    statement may return (None: no limit). Raises InvalidInputError for a bad value.
    """

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


class Guarded:
    """One guarded read-only connection (see the module docstring) with its limits.

    With ``snapshot=True`` every statement run on it reads the same committed state (one read
    transaction, begun before the authorizer that refuses transactions is installed).
    Raises what :func:`podstore.sqlite.connection.connect` raises for a file it cannot open.
    """

    def __init__(self, options: ConnectOptions, limits: Limits, *, snapshot: bool) -> None:
        self.limits = limits
        self._spent = 0.0
        self._entered: float | None = None
        self._interrupted = False
        self._forked = False
        self._pid = os.getpid()
        # The thread inside a call now: the connection and the time counted are one thread's
        # at a time. (Not a lock: an interrupt between taking it and the try that gives it
        # back would leave the reader refusing every later call.)
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

    # fork (sqlite/forking.py): a fork waits for a statement or page fetch in flight (each
    # counts as an activity), never for a reader merely held open; the child's copy is
    # closed at once — it only ever read, so closing it releases nothing the parent holds —
    # and refuses any further use.
    def fork_timeout(self) -> float | None:
        return None

    def fork_writing(self, thread: int) -> object:
        return None

    def fork_quiesce(self) -> None:
        pass

    def fork_parent(self) -> None:
        pass

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
        """Run ``fn`` (a call into SQLite) with its time counted against the limit and its
        errors turned into podstore's."""
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
        if isinstance(exc, (sqlite3.Warning, sqlite3.ProgrammingError)):
            return InvalidInputError(f"sql: {text}")  # e.g. two statements, wrong bindings
        if isinstance(exc, sqlite3.OperationalError) and name in ("", "SQLITE_ERROR"):
            return InvalidInputError(f"sql: {text}")  # bad SQL: syntax, no such table, ...
        mapped = translate(exc)
        if mapped is None or type(mapped) is PodStoreError:
            return InvalidInputError(f"sql: {text}")
        return mapped

    def rows(self, sql: str, params: Params = None) -> RowStream[tuple[Any, ...]]:
        """Start one statement; its rows stream from the returned RowStream.

        Raises ReadOnlyStoreError for a statement that would write (or is otherwise refused),
        InvalidInputError for bad SQL or parameters, QueryLimitError past a limit.
        """
        if not isinstance(sql, str):
            raise InvalidInputError(f"sql: expected str, got {type(sql).__name__}")
        conn = self.conn
        if conn is None:
            raise self._closed_error()
        cur = self.call(lambda: conn.execute(sql, params if params is not None else ()))
        return RowStream(self, cur, tuple)

    def close(self) -> None:
        # Inside the activity from the moment the connection leaves self.conn: a fork
        # between the two would leave the child a connection that nobody closes.
        with forking.activity():
            conn, self.conn = self.conn, None
            if conn is not None:
                conn.close()

    def __del__(self) -> None:
        # A reader dropped without close(): close its connection now. (A sqlite3 connection
        # is kept alive by a reference cycle with its statement cache, so it would stay open
        # until the cyclic collector ran — and one that a forked child inherits that way, its
        # owner already gone when the child's clean-up runs, would keep SQLite's records of
        # the parent's locks alive in the child.)
        if getattr(self, "conn", None) is None:
            return
        try:
            if os.getpid() != self._pid:
                # A forked child freeing the parent's threads (before its clean-up runs):
                # the connection was idle, the fork waited for that.
                conn, self.conn = self.conn, None
                if conn is not None:
                    conn.close()
            else:
                self.close()
        except Exception:  # pragma: no cover - at interpreter shutdown anything may be gone
            pass


class RowStream(Generic[T]):
    """The rows of one statement, fetched page by page as they are iterated.

    ``columns`` are the statement's column names. Iterate it (once) for the rows; ``close()``
    (or a ``with`` block) ends it early. Iteration raises QueryLimitError when the reader's
    time limit runs out or the statement returns more than ``max_rows`` rows; the rows
    already returned stay valid.
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
    """Run one statement on a new guarded connection and fetch every row (``PodStore.query``).

    Raises ReadOnlyStoreError for a statement that would write (or is otherwise refused),
    InvalidInputError for bad SQL or parameters, QueryLimitError past a limit.
    """
    guarded = Guarded(options, limits or Limits(), snapshot=False)
    try:
        with guarded.rows(sql, params) as rows:
            return QueryResult(rows.columns, list(rows))
    finally:
        guarded.close()
