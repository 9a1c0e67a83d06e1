"""SQLite connections: options, pragmas, BEGIN IMMEDIATE.

Every connection podstore makes goes through :func:`connect`, so the settings below hold for
the store's own connections, for Alembic's, and for the command line's.
"""

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
from podstore.sqlite.files import check_readable_store_file, prepare_file
from podstore.sqlite.forking import STATE
from podstore.sqlite.translate import translate, translated_errors

if TYPE_CHECKING:
    # SQLAlchemy is only needed for migrations and URL parsing; importing it costs ~120 ms of
    # every process start (docs/performance.md), so it is imported where it is used.
    import sqlalchemy
    from sqlalchemy.engine import Engine

log = logging.getLogger("podstore")

Durability = Literal["full", "normal"]

#: The WAL is truncated to this size when SQLite restarts it from the beginning (the first
#: commit after a checkpoint that copied every frame). Without a limit a WAL that grew while a
#: long read held its snapshot (or for one big import) keeps that size for ever. Twice the
#: steady state of ``wal_autocheckpoint`` (1,000 pages plus the last commit's, about 4.2 MB
#: with 4 KiB pages), so ordinary commits never pay for a truncate and a re-extension;
#: tests/test_reliability_wal.py shows the bound.
JOURNAL_SIZE_LIMIT = 8 * 1024 * 1024
#: The ``PRAGMA application_id`` of a podstore store (the ASCII bytes "PDST" at offset 68 of
#: the file header), set when a store is created or upgraded and when an older store without
#: one is opened writable. A file carrying another application's id is never opened, even when
#: it holds no tables (docs/design.md, "Whose file it is").
APPLICATION_ID = 0x50445354

#: SQLite's own checkpoint, run by the committing connection once the WAL holds this many
#: pages (SQLite's usual default, set explicitly in case a build changed it: 0 would never
#: checkpoint and the WAL would grow without bound).
WAL_AUTOCHECKPOINT = 1000

# Settings of every new connection, set and then read back (``_configure``).
# journal_mode is persistent in the file and needs write access, so it is handled apart.
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
# The effective values, read back in one statement (table-valued pragma functions).
_READ_BACK = (
    "SELECT (SELECT * FROM pragma_journal_mode), (SELECT * FROM pragma_synchronous), "
    "(SELECT * FROM pragma_foreign_keys), (SELECT * FROM pragma_temp_store), "
    "(SELECT * FROM pragma_journal_size_limit), (SELECT * FROM pragma_busy_timeout)"
)
_READ_BACK_NAMES = (
    "journal_mode",
    "synchronous",
    "foreign_keys",
    "temp_store",
    "journal_size_limit",
    "busy_timeout",
)


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How to connect to one store file."""

    path: str
    readonly: bool = False
    durability: Durability = "full"
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT

    def __post_init__(self) -> None:
        # NaN passes a ``< 0`` check and infinity overflows int(): both would escape as
        # ValueError/OverflowError from deep inside connect (tests/test_reliability_fuzz.py).
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
    """Turn a file path or an ``sqlite:///`` SQLAlchemy URL into a file path.

    Raises InvalidInputError for other databases, for a URL with options (``?...``), and for
    in-memory SQLite, which could not survive a crash and is not shared between podstore's
    per-thread connections.
    """
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
            # SQLAlchemy keeps the query apart from the database name (and drops a bare
            # ``?x``): honoured nowhere, it would open (or create) a file named without it.
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
    """Open one configured connection.

    isolation_level=None stops pysqlite from issuing its own BEGINs; podstore issues every
    BEGIN itself so that writers take the lock up front (BEGIN IMMEDIATE).
    """
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
            if STATE.generation:
                _verify_child_lock(conn, options)
        except BaseException:
            conn.close()
            raise
    return conn


def _verify_child_lock(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    """In a forked child, check that this connection really holds its lock (see
    sqlite/forking.py): after a read, a connection to a WAL database keeps a SHARED lock."""
    if isinstance(conn, ImmutableConnection):
        return  # takes no locks at all
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    wal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
    forking.verify_locks(os.path.abspath(options.path), wal)


def foreign_reason(conn: sqlite3.Connection) -> str | None:
    """Why the database ``conn`` reads is not a podstore store (another application's
    ``application_id``, or tables without podstore's version table), or None. Reads only."""
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id not in (0, APPLICATION_ID):
        return f"it belongs to another application (application_id {app_id & 0xFFFFFFFF:#010x})"
    names = {
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if names and "alembic_version" not in names:
        return "it has tables but no podstore schema version"
    return None


def _connect_readonly(options: ConnectOptions) -> sqlite3.Connection:
    """A read-only connection, also where neither the file nor its directory is writable.

    A WAL database needs its -shm file. If it exists (a writer has it open, or crashed),
    SQLite reads through it even without write access. If it is missing and cannot be
    created (read-only directory or mount), the file is opened ``immutable=1`` — but only
    when there is no -wal with content: immutable ignores the WAL, and would silently show
    an old state (https://sqlite.org/wal.html#readonly; tests/test_reliability_security.py).
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
    except sqlite3.OperationalError as exc:
        conn.close()
        name = str(getattr(exc, "sqlite_errorname", ""))
        if not (name.startswith("SQLITE_READONLY") or name.startswith("SQLITE_CANTOPEN")):
            raise
        try:
            wal_size = os.path.getsize(path + "-wal")
        except FileNotFoundError:
            wal_size = 0
        if wal_size > 0:
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
    """The database's journal mode as stored in the file ('wal', 'delete', ...).

    ``PRAGMA journal_mode`` answers 'delete' on an immutable connection whatever the file
    says, so there the file header is read instead (bytes 18-19 are 2 for WAL).
    """
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if not isinstance(conn, ImmutableConnection):
        return mode
    path = next((str(r[2]) for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "")
    # Closing a descriptor of the file drops every POSIX lock this process holds on it
    # (sqlite/posixlocks.py): read it only when there is none to drop.
    if not path or posixlocks.holds_locks(path):
        return mode
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return mode
    return "wal" if header[18:20] == b"\x02\x02" else mode


def expected_settings(options: ConnectOptions) -> dict[str, int | str]:
    """The settings a connection made with ``options`` must run with, as SQLite reports them.

    A read-only connection never writes, so its journal mode and synchronous setting do not
    matter (a file opened ``immutable=1`` even reports ``delete``); they are left out.
    """
    wanted: dict[str, int | str] = dict(_PRAGMAS)
    wanted["busy_timeout"] = int(options.busy_timeout * 1000)
    if not options.readonly:
        wanted["journal_mode"] = "wal"
        wanted["synchronous"] = _SYNCHRONOUS[options.durability]
    return wanted


def effective_settings(conn: sqlite3.Connection) -> dict[str, int | str]:
    """The settings ``conn`` runs with now, read from SQLite (not from what was asked)."""
    row = conn.execute(_READ_BACK).fetchone()
    out: dict[str, int | str] = dict(zip(_READ_BACK_NAMES, row, strict=True))
    out["journal_mode"] = str(out["journal_mode"]).lower()
    # not a table-valued pragma (it has a side effect), so read on its own
    out["wal_autocheckpoint"] = int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    return out


def check_settings(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    """Raise PodStoreError unless ``conn`` runs with every setting podstore relies on.

    Setting a pragma is no proof that it holds: SQLite ignores some silently (foreign_keys
    inside a transaction), a build may swap in its own defaults (SQLITE_DEFAULT_WAL_SYNCHRONOUS
    turns FULL into NORMAL when a file is found in WAL mode, unless synchronous was set
    explicitly), and a weaker setting is invisible until a power cut. So podstore refuses to
    run with one rather than run without saying so.
    """
    wanted = expected_settings(options)
    got = effective_settings(conn)
    wrong = [f"{k} is {got[k]!r}, not {v!r}" for k, v in wanted.items() if got.get(k) != v]
    if wrong:
        raise PodStoreError(
            f"{options.path}: SQLite did not apply podstore's settings ({'; '.join(wrong)}); "
            "refusing to run with weaker guarantees than documented (docs/reliability.md)"
        )


def _configure(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    """Apply podstore's settings to a new connection, then read them back (check_settings).

    The journal mode comes first: it reads the file, which is when a build's WAL default for
    synchronous would apply. synchronous is then always set explicitly, which SQLite never
    overrides, and the read-back that follows sees the value that commits will use.
    """
    if not options.readonly:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            # Switching writes the file header: never on a file podstore then refuses
            # (another application's database stays exactly as it was).
            reason = foreign_reason(conn)
            if reason is not None:
                raise SchemaError(f"not a podstore database: {options.path}: {reason}")
            # WAL: readers never block the writer and a commit is one sequential append.
            # Processes opening a new file at once race to switch it (tests/
            # test_reliability_concurrency.py); the loser is told busy without waiting.
            switch = _retry_busy(conn, "PRAGMA journal_mode = wal", options.busy_timeout)
            got = switch.fetchone()[0]
            if str(got).lower() != "wal":
                raise StoreCorruptError(f"could not switch {options.path} to WAL (got {got})")
        conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[options.durability]}")
    for name, value in _PRAGMAS.items():
        conn.execute(f"PRAGMA {name} = {int(value)}")
    conn.execute(f"PRAGMA busy_timeout = {int(options.busy_timeout * 1000)}")
    check_settings(conn, options)


def begin_immediate(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """BEGIN IMMEDIATE, retried until busy_timeout when SQLite answers busy at once."""
    _retry_busy(conn, "BEGIN IMMEDIATE", busy_timeout)


def _retry_busy(conn: sqlite3.Connection, sql: str, busy_timeout: float) -> sqlite3.Cursor:
    """Run ``sql``, retried until busy_timeout when SQLite answers busy at once.

    The busy handler normally waits inside the call, but SQLite returns SQLITE_BUSY without
    waiting in some cases (while another connection recovers the WAL; two connections of a new
    file switching it to WAL at once, where waiting could deadlock), so a bounded retry loop
    sits on top; past the deadline the caller gets StoreBusyError.
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
    """An SQLAlchemy engine over podstore's own connections (used by Alembic and admin code).

    Transactions begun through it start with BEGIN IMMEDIATE, so a migration holds the write
    lock from its first statement and DDL is rolled back as a whole on failure.
    """
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
        begin_immediate(raw, opts.busy_timeout)  # the migration's lock, with the busy retry

    return engine
