"""SQLite connections: pragmas, BEGIN IMMEDIATE, error translation, migrate-on-open.

Every connection podstore makes goes through :func:`connect`, so the settings below hold for
the store's own connections, for Alembic's, and for the command line's.
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import logging
import math
import os
import sqlite3
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from podstore.errors import (
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
    SchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreFullError,
)
from podstore.fsutil import fsync_directory

if TYPE_CHECKING:
    # SQLAlchemy is only needed for migrations and URL parsing; importing it costs ~120 ms of
    # every process start (docs/performance.md), so it is imported where it is used.
    import sqlalchemy
    from sqlalchemy.engine import Engine

log = logging.getLogger("podstore")

Durability = Literal["full", "normal"]

DEFAULT_BUSY_TIMEOUT = 10.0
# SQLite takes the busy timeout as an int of milliseconds.
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000

# Pragmas applied to every new connection, only where the current value differs.
# journal_mode is persistent in the file and needs write access, so it is handled apart.
_PRAGMAS: dict[str, int] = {
    # ON DELETE CASCADE from pods down to device rows depends on this.
    "foreign_keys": 1,
    # Temp b-trees (sorts, DISTINCT) stay in memory: no stray files next to a 0600 database.
    "temp_store": 2,
}
# synchronous: FULL fsyncs the WAL at every commit, so a returned call survives power loss;
# NORMAL may lose the last commits (never corrupts) and is opt-in.
_SYNCHRONOUS = {"full": 2, "normal": 1}


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

    Raises InvalidInputError for other databases and for in-memory SQLite, which could not
    survive a crash and is not shared between podstore's per-thread connections.
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
        path = url.database or ""
    else:
        path = path_or_url
    if path in ("", ":memory:") or path.startswith("file::memory:"):
        raise InvalidInputError("database: an in-memory SQLite database is not a durable store")
    return path


def database_url(path_or_url: str | os.PathLike[str]) -> str:
    """The ``sqlite:///`` URL of a store given as a path or URL."""
    return "sqlite:///" + database_path(path_or_url)


# IOERR subcodes that mean a write did not reach the disk. SQLite reports ENOSPC as SQLITE_FULL
# for plain writes, but as one of these when it happens while growing the WAL, the -shm file or
# during a checkpoint (seen on a full tmpfs, tests/test_reliability_diskfull.py).
_WRITE_IOERRS = ("WRITE", "FSYNC", "TRUNCATE", "SHMSIZE", "SHMMAP", "FALLOCATE", "DIR_FSYNC")
# IOERR subcodes that mean stored bytes could not be read back.
_READ_IOERRS = ("READ", "SHORT_READ", "CORRUPTFS", "DATA")


def translate(exc: BaseException) -> PodStoreError | None:
    """The podstore error for a sqlite3 (or SQLAlchemy-wrapped) error, or None if not one.

    Every sqlite3 error maps to some PodStoreError: the specific subclass where the cause is
    known (busy, full, corrupt, read-only, too big), else the PodStoreError base naming
    SQLite's error code, so that no raw ``sqlite3`` exception reaches a caller
    (tests/test_reliability_fuzz.py pins this).
    """
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, sqlite3.Error):
        return None
    code = getattr(orig, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    ext = str(getattr(orig, "sqlite_errorname", "") or "")
    text = str(orig)
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text:
        return StoreBusyError(f"the database stayed locked past the busy timeout ({text})")
    if primary == sqlite3.SQLITE_FULL or "disk is full" in text:
        return StoreFullError(f"the disk is full; nothing was written ({text})")
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in text:
        return StoreCorruptError(f"the database file is damaged: {text}")
    if primary == sqlite3.SQLITE_READONLY or "readonly database" in text:
        return ReadOnlyStoreError(f"the store is read-only: {text}")
    if primary == sqlite3.SQLITE_IOERR:
        sub = ext.removeprefix("SQLITE_IOERR_")
        if sub in _WRITE_IOERRS:
            return StoreFullError(f"a write to the database failed (disk full?): {text} [{ext}]")
        if sub in _READ_IOERRS:
            return StoreCorruptError(f"the database file could not be read: {text} [{ext}]")
        return PodStoreError(f"I/O error on the database: {text} [{ext}]")
    if primary == sqlite3.SQLITE_TOOBIG or "too big" in text:
        return InvalidInputError(f"a value is larger than SQLite can store: {text}")
    if primary == sqlite3.SQLITE_CANTOPEN:
        return PodStoreError(f"cannot open the database file: {text} [{ext}]")
    if isinstance(orig, sqlite3.ProgrammingError) and "closed" in text:
        return PodStoreError("the store is closed")
    return PodStoreError(f"SQLite error: {text}" + (f" [{ext}]" if ext else ""))


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise sqlite3 errors as podstore's own, ``from None`` as in diskcache.

    An error without a specific podstore meaning keeps the sqlite3 error as its cause, for
    debugging.
    """
    try:
        yield
    except Exception as exc:
        # sqlite3 errors, and the same wrapped by SQLAlchemy (which need not be imported).
        if not isinstance(exc, sqlite3.Error) and not isinstance(
            getattr(exc, "orig", None), sqlite3.Error
        ):
            raise
        mapped = translate(exc)
        if mapped is None:
            raise
        if type(mapped) is PodStoreError:
            raise mapped from exc
        raise mapped from None


def _prepare_file(path: str) -> None:
    """Create the database file 0600 (and missing parents 0700) before SQLite touches it.

    A created file and directory are fsynced together with their parent, so a store created
    and written survives power loss even where fsync of a file does not persist its name
    (SQLite syncs the directory only for the journal and WAL it creates itself).
    Raises ReadOnlyStoreError when the file or its directory cannot be written, StoreFullError
    when the disk is full.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        _make_private_dirs(parent)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            _check_writable(path)
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(parent)
    except OSError as exc:
        raise _os_error(exc, path) from None


def _make_private_dirs(directory: str) -> None:
    """os.makedirs with every created level 0700 (makedirs gives intermediate levels the
    default mode), each one fsynced into its parent."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent != directory:
        _make_private_dirs(parent)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)  # the umask may have taken bits away, never added them
    fsync_directory(parent)


def _check_writable(path: str) -> None:
    """A writable open needs the file and its directory (for -wal and -shm) writable."""
    targets = [(path, "file")]
    if not all(os.path.exists(path + suffix) for suffix in ("-wal", "-shm")):
        targets.append((os.path.dirname(path), "directory"))
    for target, what in targets:
        if not os.access(target, os.W_OK):
            raise ReadOnlyStoreError(
                f"the database {what} {target} is not writable; open it with readonly=True"
            )


def _os_error(exc: OSError, path: str) -> PodStoreError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"cannot create {path}: the disk is full ({exc.strerror})")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ReadOnlyStoreError(f"cannot create {path}: {exc.strerror}")
    return PodStoreError(f"cannot create {path}: {exc.strerror or exc}")


def warn_if_writable_by_others(path: str) -> None:
    """Warn (UserWarning, attributed to the caller outside podstore) when group or other
    users may write the database file or its WAL."""
    for candidate in (path, path + "-wal"):
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if mode & (stat.S_IWOTH | stat.S_IWGRP):
            warnings.warn(
                f"{candidate} is writable by other users (mode {stat.S_IMODE(mode):o}); anyone "
                "with that access can rewrite the node's device allocations",
                stacklevel=_caller_stacklevel(),
            )
            return


def _caller_stacklevel() -> int:
    """The warnings stacklevel of the first frame outside the podstore package."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package_dir + os.sep
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def connect(options: ConnectOptions) -> sqlite3.Connection:
    """Open one configured connection.

    isolation_level=None stops pysqlite from issuing its own BEGINs; podstore issues every
    BEGIN itself so that writers take the lock up front (BEGIN IMMEDIATE).
    """
    with translated_errors():
        if options.readonly:
            conn = _connect_readonly(options)
        else:
            _prepare_file(options.path)
            conn = sqlite3.connect(
                options.path,
                timeout=options.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        try:
            _configure(conn, options)
        except BaseException:
            conn.close()
            raise
    return conn


def _connect_readonly(options: ConnectOptions) -> sqlite3.Connection:
    """A read-only connection, also where neither the file nor its directory is writable.

    A WAL database needs its -shm file. If it exists (a writer has it open, or crashed),
    SQLite reads through it even without write access. If it is missing and cannot be
    created (read-only directory or mount), the file is opened ``immutable=1`` — but only
    when there is no -wal with content: immutable ignores the WAL, and would silently show
    an old state (https://sqlite.org/wal.html#readonly; tests/test_reliability_security.py).
    """
    path = os.path.abspath(options.path)
    if not os.path.exists(path):
        raise InvalidInputError(f"database: {options.path} does not exist (opened read-only)")
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
    )


def _configure(conn: sqlite3.Connection, options: ConnectOptions) -> None:
    wanted = dict(_PRAGMAS)
    wanted["busy_timeout"] = int(options.busy_timeout * 1000)
    if not options.readonly:
        wanted["synchronous"] = _SYNCHRONOUS[options.durability]
    for name, value in wanted.items():
        current = conn.execute(f"PRAGMA {name}").fetchone()[0]
        if current != value:
            conn.execute(f"PRAGMA {name} = {int(value)}")
    if not options.readonly:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            # WAL: readers never block the writer and a commit is one sequential append.
            got = conn.execute("PRAGMA journal_mode = wal").fetchone()[0]
            if str(got).lower() != "wal":
                raise StoreCorruptError(f"could not switch {options.path} to WAL (got {got})")


def begin_immediate(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """BEGIN IMMEDIATE, retried until busy_timeout when SQLite answers busy at once.

    The busy handler normally waits inside the call, but SQLite returns SQLITE_BUSY without
    waiting in some cases (e.g. while another connection recovers the WAL), so a bounded retry
    loop sits on top; past the deadline the caller gets StoreBusyError.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
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
        conn.exec_driver_sql("BEGIN" if opts.readonly else "BEGIN IMMEDIATE")

    return engine


# ---- migrations ----------------------------------------------------------------------------


def migrations_dir() -> str:
    """Where the Alembic scripts are: podstore.migrations (the top-level migrations/ folder)."""
    spec = importlib.util.find_spec("podstore.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError("podstore.migrations is not installed; reinstall podstore")
    return str(next(iter(spec.submodule_search_locations)))


@functools.cache
def script_directory() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(migrations_dir())


def head_revision() -> str:
    """The newest schema revision this podstore knows."""
    head = script_directory().get_current_head()
    assert isinstance(head, str)
    return head


def alembic_config(connection: sqlalchemy.Connection | None = None) -> Any:
    """An Alembic Config built in code (no ini, so no logging reconfiguration)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir())
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


#: current_revision() of a database whose schema was downgraded to base.
BASE = "base"


def current_revision(conn: sqlite3.Connection) -> str | None:
    """The stored revision; None for an empty database, BASE when the schema was downgraded
    to nothing (the version table is left, empty).

    Raises SchemaError when the file holds tables but no Alembic version (not podstore's).
    """
    with translated_errors():
        names = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        if not names:
            return None
        if "alembic_version" not in names:
            raise SchemaError(
                "not a podstore database: it has tables but no podstore schema version"
            )
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return BASE if row is None else str(row[0])


def quick_check(conn: sqlite3.Connection) -> None:
    """Raise StoreCorruptError unless ``PRAGMA quick_check`` finds the file sound.

    Run on every open: a damaged page otherwise goes unnoticed until a query happens to read
    it (an index page, say, is read only by some look-ups), and a node agent must learn at
    start, not halfway through an allocation. It reads every page once (about 1 ms per MB;
    docs/reliability.md has figures); tests/test_reliability_damage.py pins it.
    """
    with translated_errors():
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    if rows != ["ok"]:
        raise StoreCorruptError("the database file is damaged: " + "; ".join(rows))


#: The newest revision under migrations/versions. A store already at this revision opens
#: without loading Alembic, whose import and script scan cost ~140 ms per process start
#: (docs/performance.md, "open-to-first-answer"). Bump it with every new migration; a test
#: pins it to Alembic's head: assert HEAD_REVISION == head_revision().
HEAD_REVISION = "0002"


def classify_revision(rev: str | None) -> Literal["current", "old", "new-file", "too-new"]:
    if rev is None:
        return "new-file"
    if rev == HEAD_REVISION:
        return "current"
    if rev == BASE:
        # Downgraded on purpose: an old schema, so upgrade=False must refuse it.
        return "old"
    if rev == head_revision():
        return "current"
    try:
        known = script_directory().get_revision(rev)
    except Exception:
        known = None
    return "old" if known is not None else "too-new"


def ensure_schema(options: ConnectOptions, *, upgrade: bool, check: bool = True) -> None:
    """Bring the file to the head revision (or check it is there), as PodStore.open promises.

    The upgrade runs on a connection inside BEGIN IMMEDIATE with transactional DDL: a failed
    migration leaves the previous schema, and two processes opening a new file at once
    migrate it exactly once.
    """
    warn_if_writable_by_others(os.path.abspath(options.path))
    probe = connect(options)
    try:
        if check:
            quick_check(probe)
        state = classify_revision(current_revision(probe))
    finally:
        probe.close()
    if state == "current":
        return
    if state == "too-new":
        raise SchemaError(
            "the database was written by a newer podstore (unknown schema revision); "
            "upgrade podstore to read it"
        )
    if options.readonly:
        raise SchemaError(
            "the database schema is not at the current revision and a read-only open never "
            "migrates; open it writable or run `podstore migrate upgrade`"
        )
    if state == "old" and not upgrade:
        raise SchemaError(
            "the database schema is older than this podstore and upgrade=False; run "
            "`podstore migrate upgrade` or open with upgrade=True"
        )
    run_upgrade(options, "head")


def run_upgrade(options: ConnectOptions, target: str) -> None:
    _run_alembic(options, lambda cfg: _alembic_command("upgrade")(cfg, target))


def run_downgrade(options: ConnectOptions, target: str) -> None:
    _run_alembic(options, lambda cfg: _alembic_command("downgrade")(cfg, target))


def _alembic_command(name: str) -> Callable[..., None]:
    from alembic import command

    fn: Callable[..., None] = getattr(command, name)
    return fn


def _run_alembic(options: ConnectOptions, action: Callable[[Any], None]) -> None:
    engine = create_sqlalchemy_engine(database_url(options.path), options)
    try:
        with translated_errors(), engine.begin() as connection:
            action(alembic_config(connection))
    finally:
        engine.dispose()
