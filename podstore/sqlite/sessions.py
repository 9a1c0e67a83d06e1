"""Per-thread connections, write transactions and savepoints, snapshots, and the background
integrity check: everything ``PodStore`` needs to run statements safely from many threads.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from podstore.errors import PodStoreError, ReadOnlyStoreError
from podstore.sqlite.connection import ConnectOptions, begin_immediate, connect
from podstore.sqlite.integrity import quick_check
from podstore.sqlite.translate import translated_errors

log = logging.getLogger("podstore")


class _ThreadState(threading.local):
    """Each thread gets its own SQLite connection (sqlite3 objects must not be shared)."""

    conn: sqlite3.Connection | None = None
    pid: int = 0
    depth: int = 0


class Sessions:
    """The connections of one open store, one per thread (and per process after fork)."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._local = _ThreadState()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._checker: threading.Thread | None = None
        self._checker_conn: sqlite3.Connection | None = None
        self._damage: PodStoreError | None = None
        # verify="auto": writes wait until the background check has passed.
        self._gate_writes = False

    @property
    def closed(self) -> bool:
        return self._closed

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, made on first use. Raises PodStoreError once closed, and
        the damage the background check found once it found some."""
        state = self._local
        if self._closed:
            raise PodStoreError("the store is closed")
        if self._damage is not None:
            raise self._damage
        if state.conn is None or state.pid != os.getpid():
            # After fork() the inherited connection belongs to the parent: closing it here
            # could drop the parent's POSIX locks, so it is abandoned, not closed.
            conn = connect(self.options)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise PodStoreError("the store is closed")
                self._connections.append(conn)
            state.conn, state.pid, state.depth = conn, os.getpid(), 0
        return state.conn

    def close(self) -> None:
        """Close every connection; a running background check is interrupted first."""
        with self._lock:
            self._closed = True
            conns, self._connections = self._connections, []
            if self._checker_conn is not None:
                self._checker_conn.interrupt()  # a check cut short is not a finding
        if self._checker is not None and self._checker is not threading.current_thread():
            self._checker.join()
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:  # pragma: no cover - close errors have nothing to undo
                log.debug("error closing a connection", exc_info=True)

    # ---- transactions ----------------------------------------------------------------------

    def write(self) -> _Write:
        """One atomic write: BEGIN IMMEDIATE … COMMIT, or a SAVEPOINT inside an open one.

        Use as ``with sessions.write() as conn:``; sqlite3 errors inside become podstore
        errors, and any exception rolls the write back.
        """
        if self.options.readonly:
            raise ReadOnlyStoreError("the store was opened read-only")
        if self._gate_writes:
            self._wait_for_check()
        return _Write(self)

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A consistent read over several statements (or the open write transaction)."""
        conn = self.conn()
        if self._local.depth or conn.in_transaction:
            with translated_errors():
                yield conn
            return
        with read_transaction(conn):
            yield conn

    # ---- the background integrity check (open(verify="background")) ------------------------

    def start_background_check(self, *, gate_writes: bool = False) -> None:
        """Run ``quick_check`` on a connection of its own, in a daemon thread; with
        ``gate_writes`` every write first waits for it to pass (and raises what it found).

        The connection is made here, so that the thread goes straight into SQLite (which
        runs without the GIL) and does not compete with the caller's first calls for it.
        """
        conn = connect(self.options)  # raises like the store's own connection would
        self._gate_writes = gate_writes
        self._checker_conn = conn
        self._checker = threading.Thread(
            target=self._background_check, args=(conn,), name="podstore-quick-check", daemon=True
        )
        self._checker.start()

    def _background_check(self, conn: sqlite3.Connection) -> None:
        try:
            quick_check(conn)
        except PodStoreError as exc:
            if not self._closed:  # close() interrupts the check: that is not a finding
                log.error("%s: %s", self.options.path, exc)
                self._damage = exc
        except sqlite3.Error:
            pass
        finally:
            with self._lock:
                self._checker_conn = None
            conn.close()

    def _wait_for_check(self) -> None:
        checker = self._checker
        if checker is not None and checker is not threading.current_thread():
            checker.join()
        if self._damage is not None:
            raise self._damage
        self._gate_writes = False  # passed: later writes need not look again

    def wait_checked(self, timeout: float | None) -> bool:
        """True once the background check passed (at once when none runs), False on timeout;
        raises what it found."""
        if self._checker is not None:
            self._checker.join(timeout)
            if self._checker.is_alive():
                return False
        if self._damage is not None:
            raise self._damage
        return True


class _Write:
    """The context of :meth:`Sessions.write`: a class rather than a generator-based context
    manager, since every insert passes through it (fewer Python calls per write)."""

    __slots__ = ("_conn", "_savepoint", "_sessions")

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions
        self._savepoint: str | None = None

    def __enter__(self) -> sqlite3.Connection:
        sessions = self._sessions
        conn = sessions.conn()
        state = sessions._local
        try:
            if state.depth:
                # A failing call inside a transaction() block must not leave half of itself
                # behind if the caller catches the error and carries on.
                name = f"podstore_{state.depth}"
                conn.execute(f"SAVEPOINT {name}")
                self._savepoint = name
            else:
                begin_immediate(conn, sessions.options.busy_timeout)
        except sqlite3.Error as exc:
            _raise_translated(exc)
        state.depth += 1
        self._conn = conn
        return conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        conn, name = self._conn, self._savepoint
        state = self._sessions._local
        try:
            if name is not None:
                if exc_type is not None:
                    conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
            elif exc_type is None:
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error as error:
            _raise_translated(error)
        finally:
            state.depth = state.depth - 1 if name is not None else 0
        if isinstance(exc, sqlite3.Error):
            _raise_translated(exc)


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction on ``conn`` (a consistent view over several statements); sqlite3
    errors inside become podstore errors."""
    with translated_errors():
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")


def _raise_translated(exc: sqlite3.Error) -> NoReturn:
    """Raise what translated_errors makes of ``exc``."""
    with translated_errors():
        raise exc
    raise AssertionError("unreachable: translated_errors re-raises every sqlite3 error")
