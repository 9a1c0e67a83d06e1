"""SQLite connections: options, pragmas, BEGIN IMMEDIATE. Every connection podstore makes
(the store's, Alembic's, the command line's) goes through :func:`connect`."""

from __future__ import annotations

import functools
import logging
import math
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from podstore.errors import (
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
    SchemaError,
    StoreBusyError,
    StoreCorruptError,
)
from podstore.sqlite import forking, posixlocks
from podstore.sqlite.busy import DEFAULT_BUSY_TIMEOUT as DEFAULT_BUSY_TIMEOUT
from podstore.sqlite.busy import MAX_BUSY_TIMEOUT as MAX_BUSY_TIMEOUT
from podstore.sqlite.files import check_readable_store_file, prepare_file, wal_size
from podstore.sqlite.forking import STATE
from podstore.sqlite.translate import translate, translated_errors

if TYPE_CHECKING:
    # Imported where used: it costs ~120 ms of every process start (docs/performance.md).
    import sqlalchemy
    from sqlalchemy.engine import Engine

log = logging.getLogger("podstore")

Durability = Literal["full", "normal"]

#: The size SQLite truncates the WAL to when it restarts it; without it a WAL grown under a long
#: read or a big import keeps that size for ever. Twice ``wal_autocheckpoint``'s steady state
#: (~4.2 MB with 4 KiB pages), so ordinary commits never truncate and re-extend it
#: (tests/test_reliability_wal.py).
JOURNAL_SIZE_LIMIT = 8 * 1024 * 1024
#: ``PRAGMA application_id`` of a podstore store ("PDST"), set at create, upgrade and a
#: writable open of an older store; a file with another application's id is never opened
#: (docs/design.md, "Whose file it is").
APPLICATION_ID = 0x50445354

#: WAL pages that trigger SQLite's own checkpoint: its default, set in case a build changed
#: it (0 would let the WAL grow without bound).
WAL_AUTOCHECKPOINT = 1000

# Set on every new connection and read back (``_configure``); journal_mode, persistent and
# needing write access, is handled apart.
_PRAGMAS: dict[str, int] = {
    # ON DELETE CASCADE from pods down to device rows depends on this.
    "foreign_keys": 1,
    # Temp b-trees (sorts, DISTINCT) stay in memory: no stray files next to a 0600 database.
    "temp_store": 2,
    "journal_size_limit": JOURNAL_SIZE_LIMIT,
    "wal_autocheckpoint": WAL_AUTOCHECKPOINT,
}
# synchronous: FULL fsyncs the WAL at every commit, so a returned call survives power loss;
# NORMAL may lose the last commits (never corrupts) and is opt-in.
_SYNCHRONOUS = {"full": 2, "normal": 1}
# Read back in one statement through the table-valued pragma functions.
_READ_BACK_NAMES = (
    "journal_mode",
    "synchronous",
    "foreign_keys",
    "temp_store",
    "journal_size_limit",
    "busy_timeout",
)
_READ_BACK = "SELECT " + ", ".join(f"(SELECT * FROM pragma_{n})" for n in _READ_BACK_NAMES)


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How to connect to one store file."""

    path: str
    readonly: bool = False
    durability: Durability = "full"
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT

    def __post_init__(self) -> None:
        # NaN passes ``< 0`` and infinity overflows int() deep inside connect.
        timeout = self.busy_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not 0 <= timeout <= MAX_BUSY_TIMEOUT
        ):
            raise InvalidInputError(
                f"busy_timeout: expected seconds from 0 to {MAX_BUSY_TIMEOUT}, got {timeout!r}"
            )


def database_path(path_or_url: str | os.PathLike[str]) -> str:
    """The file path of a path or ``sqlite:///`` URL. Raises InvalidInputError for other
    databases, URL options (``?...``) and in-memory SQLite (neither durable nor shared)."""
    if isinstance(path_or_url, os.PathLike):
        path_or_url = os.fspath(path_or_url)
    if not isinstance(path_or_url, str) or not path_or_url:
        raise InvalidInputError(f"database: expected a path or an sqlite URL, got {path_or_url!r}")
    if "://" in path_or_url:
        try:
            from sqlalchemy.engine import make_url
            from sqlalchemy.exc import ArgumentError

            url = make_url(path_or_url)
        except ArgumentError as exc:
            raise InvalidInputError(f"database: bad URL {path_or_url!r}: {exc}") from None
        if url.get_backend_name() != "sqlite":
            raise InvalidInputError(
                f"database: podstore keeps its state in SQLite, not {url.get_backend_name()!r}"
            )
        if "?" in path_or_url:
            query = path_or_url.split("?", 1)[1]
            # Honoured nowhere, it would silently open a file named without it.
            raise InvalidInputError(
                f"database: {path_or_url!r}: podstore takes no URL options (?{query}); give "
                "the file alone, and set modes as arguments of PodStore.open (readonly=, "
                "durability=, busy_timeout=)"
            )
        path = url.database or ""
    else:
        path = path_or_url
    if path in ("", ":memory:") or path.startswith("file::memory:"):
        raise InvalidInputError("database: an in-memory SQLite database is not a durable store")
    return path


def database_url(path_or_url: str | os.PathLike[str]) -> str:
    """The ``sqlite:///`` URL of a store given as a path or URL."""
    return "sqlite:///" + database_path(path_or_url)


def connect(options: ConnectOptions) -> sqlite3.Connection:
    """Open one configured connection (isolation_level=None: podstore issues every BEGIN,
    so writers take the lock up front)."""
    try:
        return _connect(options)
    except UnicodeDecodeError:
        # SQLite's message quoted damaged schema bytes, which Python could not decode: the
        # schema is damaged, and the message is lost with it.
        raise StoreCorruptError(
            "the database file is damaged: its schema could not be read"
        ) from None


def _connect(options: ConnectOptions) -> sqlite3.Connection:
    if STATE.generation:  # a forked child: a file it may not use is refused before opening
        forking.check_usable(options.path)
    with translated_errors():
        if options.readonly:
            conn = _connect_readonly(options)
        else:
            prepare_file(options.path)
            conn = sqlite3.connect(
                options.path,
                timeout=options.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        try:
            _configure(conn, options)
            if STATE.generation and not isinstance(conn, ImmutableConnection):
                # A forked child: this connection must hold its lock (sqlite/forking.py).
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                wal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
                forking.verify_locks(os.path.abspath(options.path), wal)
        except BaseException:
            conn.close()
            raise
    return conn


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The database's own tables (not SQLite's)."""
    sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    return {str(r[0]) for r in conn.execute(sql)}


def foreign_reason(conn: sqlite3.Connection) -> str | None:
    """Why ``conn``'s database is not a podstore store, or None (reads only)."""
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id not in (0, APPLICATION_ID):
        return f"it belongs to another application (application_id {app_id & 0xFFFFFFFF:#010x})"
    names = table_names(conn)
    if names and "alembic_version" not in names:
        return "it has tables but no podstore schema version"
    return None


def _connect_readonly(options: ConnectOptions) -> sqlite3.Connection:
    """A read-only connection, also without write access to the file or directory.

    Without a -shm that can be found or made, the file opens ``immutable=1``, but only when
    the -wal is empty: immutable ignores the WAL and would show an old state
    (https://sqlite.org/wal.html#readonly).
    """
    path = os.path.abspath(options.path)
    check_readable_store_file(options.path)
    uri = "file:" + quote(path) + "?mode=ro"
    conn = sqlite3.connect(
        uri, uri=True, timeout=options.busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except UnicodeDecodeError:
        conn.close()
        raise
    except sqlite3.OperationalError as exc:
        conn.close()
        name = str(getattr(exc, "sqlite_errorname", ""))
        if not (name.startswith("SQLITE_READONLY") or name.startswith("SQLITE_CANTOPEN")):
            raise
        if wal_size(path) > 0:
            raise ReadOnlyStoreError(
                f"{options.path} has a write-ahead log (-wal) with changes not yet in the main "
                "file, and its -shm file can neither be found nor created, so it cannot be "
                "read without write access to its directory; open it writable once (which "
                "checkpoints the log) or restore the -shm file"
            ) from None
    return sqlite3.connect(
        uri + "&immutable=1",
        uri=True,
        timeout=options.busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        factory=ImmutableConnection,
    )


class ImmutableConnection(sqlite3.Connection):
    """A read-only connection opened ``immutable=1`` (see :func:`_connect_readonly`)."""


def journal_mode(conn: sqlite3.Connection) -> str:
    """The journal mode stored in the file; on an immutable connection (where the pragma
    always says 'delete') from the header (bytes 18-19 are 2 for WAL)."""
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if not isinstance(conn, ImmutableConnection):
        return mode
    path = next((str(r[2]) for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "")
    # Closing a descriptor drops the process's POSIX locks on the file (sqlite/posixlocks.py).
    if not path or posixlocks.holds_locks(path):
        return mode
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return mode
    return "wal" if header[18:20] == b"\x02\x02" else mode


def check_settings(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    """Raise PodStoreError unless ``conn`` runs with every setting podstore relies on:
    SQLite ignores some silently (foreign_keys in a transaction), a build may change defaults
    (SQLITE_DEFAULT_WAL_SYNCHRONOUS), and a weaker setting shows only at a power cut.
    Read-only, journal mode and synchronous are left out (it never writes).
    """
    wanted: dict[str, int | str] = {**_PRAGMAS, "busy_timeout": int(options.busy_timeout * 1000)}
    if not options.readonly:
        wanted.update(journal_mode="wal", synchronous=_SYNCHRONOUS[options.durability])
    got: dict[str, int | str] = dict(
        zip(_READ_BACK_NAMES, conn.execute(_READ_BACK).fetchone(), strict=True)
    )
    got["journal_mode"] = str(got["journal_mode"]).lower()
    # not a table-valued pragma (it has a side effect), so read on its own
    got["wal_autocheckpoint"] = int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    wrong = [f"{k} is {got[k]!r}, not {v!r}" for k, v in wanted.items() if got.get(k) != v]
    if wrong:
        raise PodStoreError(
            f"{options.path}: SQLite did not apply podstore's settings ({'; '.join(wrong)}); "
            "refusing to run with weaker guarantees than documented (docs/reliability.md)"
        )


def _configure(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    """Apply podstore's settings, then check them. The journal mode comes first (reading the
    file applies a build's WAL default for synchronous), then synchronous is set explicitly.
    """
    if not options.readonly:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            # Switching writes the header: never on another application's file.
            reason = foreign_reason(conn)
            if reason is not None:
                raise SchemaError(f"not a podstore database: {options.path}: {reason}")
            # Processes opening a new file race to switch it; the loser is told busy at once.
            switch = retry_busy(conn, "PRAGMA journal_mode = wal", options.busy_timeout)
            got = switch.fetchone()[0]
            if str(got).lower() != "wal":
                raise StoreCorruptError(f"could not switch {options.path} to WAL (got {got})")
        conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[options.durability]}")
    for name, value in _PRAGMAS.items():
        conn.execute(f"PRAGMA {name} = {int(value)}")
    conn.execute(f"PRAGMA busy_timeout = {int(options.busy_timeout * 1000)}")
    check_settings(conn, options)


def retry_busy(conn: sqlite3.Connection, sql: str, busy_timeout: float) -> sqlite3.Cursor:
    """Run ``sql``, retried until busy_timeout (then StoreBusyError): SQLite answers busy
    without waiting while another connection recovers the WAL, or switches a new file to WAL.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            return conn.execute(sql)
        except sqlite3.OperationalError as exc:
            mapped = translate(exc)
            if not isinstance(mapped, StoreBusyError) or time.monotonic() >= deadline:
                if mapped is None:
                    raise
                raise mapped from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def create_sqlalchemy_engine(url: str, options: ConnectOptions | None = None) -> Engine:
    """An SQLAlchemy engine over podstore's connections (Alembic, admin code) whose
    transactions begin IMMEDIATE: a migration holds the lock from its first statement."""
    opts = options or ConnectOptions(path=database_path(url))
    import sqlalchemy
    from sqlalchemy import event
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(
        "sqlite://", creator=functools.partial(connect, opts), poolclass=NullPool
    )

    @event.listens_for(engine, "begin")
    def _begin(conn: sqlalchemy.Connection) -> None:
        if opts.readonly:
            conn.exec_driver_sql("BEGIN")
            return
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, sqlite3.Connection)
        retry_busy(raw, "BEGIN IMMEDIATE", opts.busy_timeout)  # the migration's lock

    return engine
