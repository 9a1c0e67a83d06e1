"""Connections to the fleet database (psycopg 3 through SQLAlchemy, imported on first
connect): one engine per URL and process, and driver errors turned into podstore errors
(:func:`translate`) whose text never holds the password."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from podstore.errors import (
    FleetError,
    FleetRefusedError,
    FleetUnavailableError,
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
)
from podstore.fleet.urls import FleetURL
from podstore.pure.secrets import scrub

if TYPE_CHECKING:
    import sqlalchemy
    from sqlalchemy.engine import Engine

#: Seconds to wait for the server to accept a connection.
CONNECT_TIMEOUT = 10

_engines: dict[tuple[int, str], Engine] = {}
_lock = threading.Lock()


def engine(url: FleetURL) -> Engine:
    """This process's engine for ``url`` (made on first use; a forked child makes its own)."""
    key = (os.getpid(), url.url)
    with _lock:
        found = _engines.get(key)
        if found is None:
            import sqlalchemy

            try:
                import psycopg  # noqa: F401  (the fleet extra; SQLAlchemy would fail later)
            except ImportError:
                raise FleetError(
                    "the fleet database needs the PostgreSQL driver: pip install 'podstore[fleet]'"
                ) from None
            found = sqlalchemy.create_engine(
                url.url,
                # No ping on checkout (a round trip per ship): a pooled connection that died
                # with a server restart fails its first statement, the pool drops it, and the
                # caller's retry (the watcher's backoff) gets a new one.
                pool_size=2,
                # Bound values never appear in an error's text.
                hide_parameters=True,
                connect_args={"connect_timeout": CONNECT_TIMEOUT, "application_name": "podstore"},
            )
            sqlalchemy.event.listen(found, "connect", _configure)
            _engines[key] = found
        return found


def _configure(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cur:
        # JIT compilation costs hundreds of ms, and the planner's row estimates for
        # json_to_recordset/jsonb_each trigger it on every batch; these statements are short.
        cur.execute("SET jit = off")
        # psycopg prepares a statement run five times, and PostgreSQL may then switch to a
        # generic plan, blind to the parameters: owners-at-time's generic plan cannot use the
        # device's GIN lookup (9 ms became 390 ms at 10,000,000 events). Plan every call.
        cur.execute("SET plan_cache_mode = force_custom_plan")
        # A commit need not wait for its WAL flush: a batch lost in a server crash is lost
        # whole, with the last_seq that records it, so the next ship sends it again (the node
        # keeps it, or the gap rule heals it). Exactly once does not rest on durability here.
        cur.execute("SET synchronous_commit = off")
        # UTC: the driver then reads each timestamptz with a fixed offset instead of converting
        # it to the server's zone (a third of the client's time for `fleet nodes`' 11,000 rows).
        cur.execute("SET TimeZone = 'UTC'")
    dbapi_connection.commit()


def dispose_all() -> None:
    """Close every pooled connection of this process (tests, and before a fork)."""
    with _lock:
        engines = [e for (pid, _), e in _engines.items() if pid == os.getpid()]
        _engines.clear()
    for e in engines:
        e.dispose()


# SQLSTATE classes and codes (PostgreSQL Appendix A).
_UNAVAILABLE_CLASSES = ("08", "53", "57P", "58")
_CANCELED = "57014"  # query_canceled: the statement timeout
_LOCK_TIMEOUT = "55P03"  # lock_not_available: the lock timeout
_LIMIT = "53400"  # configuration_limit_exceeded: temp_file_limit, not a server in trouble
# read_only_sql_transaction; active_sql_transaction (SET TRANSACTION READ WRITE too late)
_READ_ONLY = ("25006", "25001")
_PERMISSION = "42501"  # insufficient_privilege: the server refused the role a right
_BAD_INPUT_CLASSES = ("42", "22", "21", "0A", "2B", "3F", "P0")


def translate(exc: BaseException, url: FleetURL) -> PodStoreError:
    """The podstore error for a driver or SQLAlchemy error (message scrubbed of passwords)."""
    from sqlalchemy import exc as sa_exc

    orig = getattr(exc, "orig", None) or exc
    sqlstate = str(getattr(orig, "sqlstate", None) or "")
    text = str(orig).strip()
    first = scrub(text.splitlines()[0] if text else repr(orig), url.password)
    where = f"fleet database {url.shown}"
    if sqlstate == _CANCELED:
        return FleetError(f"{where}: the statement was cancelled (statement timeout): {first}")
    if sqlstate == _LOCK_TIMEOUT:
        waited = FleetError(f"{where}: gave up waiting for a lock (lock timeout): {first}")
        waited.lock_timeout = True  # type: ignore[attr-defined]
        return waited
    if sqlstate == _LIMIT:
        return FleetError(f"{where}: refused, past a limit the server sets for the role: {first}")
    if sqlstate in _READ_ONLY:
        return ReadOnlyStoreError(f"{where}: refused, the transaction is read-only: {first}")
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        broken = FleetUnavailableError(f"cannot reach the {where}: {first}")
        broken.pooled_connection_died = True  # type: ignore[attr-defined]
        return broken
    # No SQLSTATE on a driver error: the client could not connect or lost the connection.
    lost = isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)) and not sqlstate
    if lost or sqlstate.startswith(_UNAVAILABLE_CLASSES):
        return FleetUnavailableError(f"cannot reach the {where}: {first}")
    if sqlstate == _PERMISSION:
        return FleetRefusedError("permission", f"{where}: refused: {first}")
    if sqlstate.startswith(_BAD_INPUT_CLASSES):
        return InvalidInputError(f"{where}: {first}")
    return FleetError(f"{where}: {first}")


@contextmanager
def translated(url: FleetURL) -> Iterator[None]:
    from sqlalchemy import exc as sa_exc

    try:
        yield
    except PodStoreError:
        raise
    except (sa_exc.SQLAlchemyError, OSError) as exc:
        raise translate(exc, url) from None
    except Exception as exc:
        # psycopg's own errors (raised outside SQLAlchemy's wrapping, e.g. at connect).
        if type(exc).__module__.startswith("psycopg"):
            raise translate(exc, url) from None
        raise


T = TypeVar("T")


def retrying(url: FleetURL, fn: Callable[[], T]) -> T:
    """``fn()``, once more if a pooled connection had died (a server restart; the pool has
    dropped them all by then): every fleet operation is safe to repeat."""
    try:
        return fn()
    except FleetUnavailableError as exc:
        if not getattr(exc, "pooled_connection_died", False):
            raise
    return fn()


@contextmanager
def transaction(url: FleetURL) -> Iterator[sqlalchemy.Connection]:
    """One transaction, committed at the end of the block, rolled back on an exception."""
    with translated(url), engine(url).begin() as conn:
        yield conn


@contextmanager
def connection(url: FleetURL) -> Iterator[sqlalchemy.Connection]:
    """One pooled connection for several transactions (``with conn.begin():`` each)."""
    with translated(url), engine(url).connect() as conn:
        yield conn
