"""The connections of one open store, and what each thread and task does with them.

- A connection per thread, kept idle for the next thread when it ends (up to :data:`MAX_IDLE`)
  or closed: the store keeps one open, so closing one never checkpoints or deletes the WAL.
- A write transaction belongs to one thread and one asyncio task: same-thread calls join it
  (savepoints); another task's call, or a write from a thread whose context was copied from
  inside the block (``asyncio.to_thread``, which would deadlock on the lock), raises.
- Writers take their file's :class:`WriterQueue` (first come, first served) before SQLite's
  lock: racing SQLite's busy handler (growing poll intervals) let some of 64 threads time
  out while others wrote 35 times as often.
- fork(): inherited connections are closed (idle) or abandoned (in use): ``sqlite/forking.py``.
- The background integrity check (``open(verify="auto"|"background")``).
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import contextvars
import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, Generic, NoReturn, TypeVar

from podstore.errors import PodStoreError, ReadOnlyStoreError, StoreBusyError, StoreCorruptError
from podstore.sqlite import forking, signals
from podstore.sqlite.connection import APPLICATION_ID, ConnectOptions, connect, retry_busy
from podstore.sqlite.files import release_side_files
from podstore.sqlite.forking import STATE
from podstore.sqlite.integrity import quick_check
from podstore.sqlite.translate import translate

log = logging.getLogger("podstore")

T = TypeVar("T")

#: Connections of ended threads kept idle for the next thread (a thread per request reuses them).
MAX_IDLE = 4

# The write transactions open in this context (weak refs to their slots): a thread running in a
# copy of it (asyncio.to_thread) can tell that its write would deadlock on the caller's.
_OPEN: contextvars.ContextVar[tuple[weakref.ref[_Slot], ...]] = contextvars.ContextVar(
    "podstore_open_transactions", default=()
)


def current_task() -> object:
    """The asyncio task running on this thread, or None (asyncio is not imported for this)."""
    aio = sys.modules.get("asyncio")
    if aio is None:
        return None
    loop = aio._get_running_loop()
    if loop is None:
        return None
    return aio.current_task(loop)


# Frames that are never where a ``with`` of a store use is written (see _with_frame).
_PLUMBING = frozenset({__file__, contextlib.__file__})


def _with_frame() -> FrameType | None:
    """In the main thread (where signal handlers raise), the first caller frame outside this
    module and contextlib: the one whose ``with`` holds the use starting now."""
    if threading.get_ident() != signals.MAIN:
        return None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        frame = frame.f_back
    return frame


def _running(frame: FrameType) -> bool:
    """Whether ``frame`` is on the calling thread's stack."""
    here: FrameType | None = sys._getframe(1)
    while here is not None:
        if here is frame:
            return True
        here = here.f_back
    return False


class WriterQueue:
    """This process's writers' turn at one store file, first come, first served (each waiter
    has a lock of its own, released by the writer before it)."""

    __slots__ = ("__weakref__", "_held", "_holder", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[threading.Lock, object]] = collections.deque()
        self._held = False
        self._holder: object = None

    def acquire(self, timeout: float, me: object) -> bool:
        """Wait for the turn of ``me`` (a thread's slot), at most ``timeout`` seconds (False:
        not given)."""
        with self._lock:
            # A slot beginning a write while it still holds the turn lost the release to an
            # interrupt the signal block could not keep out (one another thread received):
            # it takes the turn again rather than waiting for itself.
            if not self._held or self._holder is me:
                self._held, self._holder = True, me
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append((turn, me))
        if turn.acquire(timeout=timeout) if timeout > 0 else turn.acquire(False):
            return True
        with self._lock:
            if (turn, me) in self._waiters:
                self._waiters.remove((turn, me))
                return False
        return True  # handed over as the wait ran out

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                turn, self._holder = self._waiters.popleft()
                turn.release()  # _held stays: the turn passes on
            else:
                self._held, self._holder = False, None


# One queue per store file, shared by the process's stores on it. A forked child inherits them
# as they were: only a transaction still open at the fork can hold one, and the child refuses
# that file anyway (sqlite/forking.py).
_queues: weakref.WeakValueDictionary[object, WriterQueue] = weakref.WeakValueDictionary()
_queues_lock = threading.Lock()


def _queue_for(file: object) -> WriterQueue:
    with _queues_lock:
        queue = _queues.get(file)
        if queue is None:
            queue = _queues[file] = WriterQueue()
        return queue


class _Slot:
    """One thread's use of one store: its connection, the open write transaction (``depth``
    levels, begun by ``owner``: a task or None) and ``busy``, the calls using it now."""

    __slots__ = (
        "__weakref__",
        "busy",
        "conn",
        "counter",
        "depth",
        "gen",
        "outer",
        "owner",
        "queue",
        "sessions",
        "thread",
    )

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = weakref.ref(sessions)
        self.thread = threading.get_ident()
        self.counter = forking.counter()
        self.conn: sqlite3.Connection | None = None
        self.gen = STATE.generation
        self.busy = 0
        self.depth = 0
        self.owner: object = None
        self.queue: WriterQueue | None = None  # whose turn the open write holds
        # The frame whose ``with`` holds the outermost use (main thread only: Sessions._unwind).
        self.outer: FrameType | None = None


class _ThreadEnd:
    """Held by the thread-local alone, so it drops as the thread ends and gives the connection
    back (the slot may outlive the thread in a traceback cycle)."""

    __slots__ = ("slot",)

    def __init__(self, slot: _Slot) -> None:
        self.slot = slot

    def __del__(self) -> None:
        try:
            slot = self.slot
            sessions = slot.sessions()
            if sessions is not None and slot.conn is not None:
                sessions._thread_ended(slot)
        except Exception:  # pragma: no cover - at interpreter shutdown anything may be gone
            pass


class _Checker:
    """The background check's thread, as a daemon Thread but started without waiting for it:
    ``Thread.start`` waits until the thread holds the GIL, on a loaded machine most of an open
    (docs/performance.md, "Start-up and open")."""

    def __init__(self, target: Callable[[sqlite3.Connection], None], conn: sqlite3.Connection):
        self._ended = threading.Event()
        self._ident: int | None = None
        _thread.start_new_thread(self._run, (target, conn))

    def _run(self, target: Callable[[sqlite3.Connection], None], conn: sqlite3.Connection) -> None:
        signals.keep_out()
        self._ident = threading.get_ident()
        try:
            target(conn)
        finally:
            self._ended.set()

    def is_alive(self) -> bool:
        return not self._ended.is_set()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    def is_current(self) -> bool:
        return self._ident == threading.get_ident()


class Sessions(forking.Participant):
    """The connections of one open store (see the module docstring)."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._local = threading.local()
        self._lock = threading.Lock()
        self._slots: weakref.WeakSet[_Slot] = weakref.WeakSet()
        self._conns: set[sqlite3.Connection] = set()  # every connection made and not closed
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        # Why calls fail at once: closed, damage found, or (in a forked child) refused.
        self._trouble: PodStoreError | None = None
        self._pid = os.getpid()
        # The file, as forks tell write locks apart (two stores may share it).
        self._file: object = forking.file_key(options.path) or options.path
        self._queue = _queue_for(self._file)
        # (st_dev, st_ino) of the file the store opened (None until a connection created it):
        # every new connection opens the path again, and must find that file there.
        self._file_id = forking.file_key(options.path)
        self._checker: _Checker | None = None
        self._checker_conn: sqlite3.Connection | None = None
        self._check_done = False
        self._check_here = False  # a child forked while the check ran: it checks itself
        self._paused = False  # a fork interrupted the check: it starts again after it
        self._damage: PodStoreError | None = None
        # verify="auto": writes wait until the background check has passed.
        self._gate_writes = False
        # The store lacks podstore's application_id: the first write sets it (migrate.py).
        self.unmarked = False
        forking.register(self)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- a thread's connection ---------------------------------------------------------------

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = _Slot(self)
            self._local.end = _ThreadEnd(slot)
            with self._lock:
                self._slots.add(slot)
        return slot

    def _enter(self) -> _Slot:
        """Start one use of this thread's connection (end it with :meth:`_exit`)."""
        slot = self._slot()
        if (
            slot.busy
            and slot.outer is not None
            and not (slot.depth and slot.owner is not current_task())  # raises below
            and not _running(slot.outer)
        ):
            self._unwind(slot)
        if slot.busy:
            # A call inside this thread's transaction() or snapshot, or a callback of one.
            if slot.gen != STATE.generation:
                raise self._forked_inside()
            if slot.depth and slot.owner is not current_task():
                raise _other_task_error()
            if self._closed:  # closed by another thread meanwhile: the block cannot go on
                raise PodStoreError("the store is closed")
            slot.busy += 1
            return slot
        forking.enter(slot.counter)  # waits while a fork is being prepared
        slot.busy = 1
        slot.outer = _with_frame()
        if self._trouble is not None or slot.conn is None or slot.gen != STATE.generation:
            try:
                self._attach(slot)
            except BaseException:
                self._exit(slot)
                raise
        return slot

    def _exit(self, slot: _Slot) -> None:
        slot.busy -= 1
        if not slot.busy:
            slot.outer = None
            if self._closed and slot.conn is not None and slot.gen == STATE.generation:
                self._give_back(slot)  # close() came while this thread used it: closed now
            forking.leave(slot.counter)

    def _unwind(self, slot: _Slot) -> None:
        """The outermost use of ``slot`` never ended and its ``with`` frame is gone (an
        interrupt before ``__exit__``'s first instruction, which no signal block covers):
        roll back what it left open so this call does not join it."""
        conn = slot.conn
        try:
            if conn is not None and slot.gen == STATE.generation and conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            _raise_translated(exc)
        finally:
            self._end_write(slot)
            slot.depth, slot.owner, slot.busy = 0, None, 0
            forking.leave(slot.counter)

    def _begin_write(self, slot: _Slot, conn: sqlite3.Connection) -> None:
        """Take this process's turn, then BEGIN IMMEDIATE, each within busy_timeout; raises
        StoreBusyError."""
        timeout = self.options.busy_timeout
        if not self._queue.acquire(timeout, slot):
            raise StoreBusyError(
                f"{self.options.path}: the writers of this process ahead of this one held the "
                f"store past the busy timeout ({timeout:g} s); nothing was written: retry, or "
                "open the store with a longer busy_timeout"
            )
        slot.queue = self._queue
        try:
            retry_busy(conn, "BEGIN IMMEDIATE", timeout)
        except BaseException:
            self._end_write(slot)
            raise

    def _end_write(self, slot: _Slot) -> None:
        """Pass the turn to write on (the write transaction ended, or was never begun)."""
        queue, slot.queue = slot.queue, None
        if queue is not None and slot.gen == STATE.generation:
            queue.release()

    def _attach(self, slot: _Slot) -> None:
        if self._trouble is not None:
            raise self._trouble
        if slot.gen != STATE.generation:
            # Made before a fork (this is the child): its connection was dealt with then.
            slot.conn, slot.gen, slot.depth, slot.owner = None, STATE.generation, 0, None
        if slot.conn is None:
            slot.conn = self._take()

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        self._check_same_file()
        conn = connect(self.options)
        try:
            self._check_same_file()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if self._trouble is None:
                self._conns.add(conn)
                return conn
            trouble = self._trouble
        conn.close()
        raise trouble

    def _check_same_file(self) -> None:
        """Refuse a connection where the path no longer names the opened file (writes would
        split between two files by thread); checked before connecting (nothing is created)
        and after (the path may change in between)."""
        found = forking.file_key(self.options.path)
        if self._file_id is None:
            self._file_id = found  # the first connection creates the file
            return
        if found != self._file_id:
            what = "deleted or moved away" if found is None else "replaced by another file"
            raise PodStoreError(
                f"{self.options.path}: the store file was {what} since the store was opened; "
                "connections opened before still write to the old file: close the store and "
                "open it again"
            )

    def _thread_ended(self, slot: _Slot) -> None:
        """``slot``'s thread ended: keep its connection for the next thread, or close it."""
        if os.getpid() != self._pid or slot.gen != STATE.generation:
            return  # a forked child clearing the parent's threads: fork_child deals with it
        with forking.activity():
            self._give_back(slot)

    def _give_back(self, slot: _Slot) -> None:
        """Keep ``slot``'s connection idle for another thread, or close it (once closed)."""
        with self._lock:
            conn, slot.conn = slot.conn, None
            if conn is None or conn not in self._conns:
                return
            keep = len(self._idle) < MAX_IDLE and not self._closed
            try:
                if conn.in_transaction:  # the thread cannot come back to finish it
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                keep = False
            finally:
                self._end_write(slot)
            if keep:
                self._idle.append(conn)
                return
            self._conns.discard(conn)
        _close_quietly(conn)

    def adopt(self, conn: sqlite3.Connection) -> None:
        """Keep ``conn`` (the open's first connection) idle for the first thread."""
        with self._lock:
            self._conns.add(conn)
            self._idle.append(conn)

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, for a statement run at once (prefer :meth:`use`, which also
        holds off a fork). Raises PodStoreError once closed, or the damage found."""
        with self.use() as conn:
            return conn

    def use(self) -> _Use:
        """``with sessions.use() as conn:`` — this thread's connection (inside a transaction:
        the transaction's) for statements that read; sqlite3 errors become podstore's."""
        return _Use(self)

    def close(self) -> None:
        """Stop the background check and close every connection (one in use: when its call
        ends). A read-only store removes the empty ``-wal``/``-shm`` if nothing else has it open."""
        self._closed = True
        self._stop_check()
        # Inside the activity: a fork in between would leave the child connections nobody closes.
        with forking.activity():
            with self._lock:
                self._trouble = PodStoreError("the store is closed")
            self._close_unused()
            if self.options.readonly:
                release_side_files(self.options.path)

    # ---- transactions ----------------------------------------------------------------------

    def write(self) -> _Write[sqlite3.Connection]:
        """``with sessions.write() as conn:`` — BEGIN IMMEDIATE … COMMIT (a SAVEPOINT inside an
        open one); an exception rolls it back, sqlite3 errors become podstore's."""
        return self._write(None)

    def transaction(self, value: T) -> _Write[T]:
        """:meth:`write` whose ``with`` gives ``value``: no wrapper for an interrupt to fall in."""
        return self._write(value)

    def _write(self, value: Any) -> _Write[Any]:
        if self.options.readonly:
            raise ReadOnlyStoreError("the store was opened read-only")
        if self._gate_writes:
            self.wait_checked(None)
            self._gate_writes = False  # passed: later writes need not look again
        return _Write(self, value)

    def snapshot(self) -> _Use:
        """A consistent read over several statements (or the open write transaction)."""
        return _Use(self, snapshot=True)

    def _joined_elsewhere(self) -> None:
        """Raise when this context was copied from inside another thread's write transaction
        of this store: a write here and that transaction would wait for each other."""
        for ref in _OPEN.get():
            other = ref()
            if (
                other is not None
                and other.sessions() is self
                and other.depth
                and other.thread != threading.get_ident()
                and other.gen == STATE.generation
            ):
                raise PodStoreError(
                    "this call runs in another thread but inside a transaction() of the same "
                    "store (e.g. asyncio.to_thread inside the block): its write would wait "
                    "for that transaction's lock while the transaction waits for it. Call it "
                    "directly inside the block (it joins the transaction), or after it; "
                    "podstore.AsyncPodStore runs a task's transaction on one thread"
                )

    def _forked_inside(self) -> PodStoreError:
        return forking.forked_error(self.options.path, "inside a call or transaction() block")

    # ---- fork (sqlite/forking.py) --------------------------------------------------------------

    def fork_timeout(self) -> float | None:
        return self.options.busy_timeout

    def fork_writing(self, thread: int) -> object:
        if any(s.depth and s.thread == thread for s in list(self._slots)):
            return self._file
        return None

    def fork_quiesce(self) -> None:
        # The check may read for seconds: interrupted rather than waited for, restarted by
        # fork_parent.
        checker = self._checker
        if checker is not None and checker.is_alive():
            self._paused = True
            with self._lock:
                if self._checker_conn is not None:
                    self._checker_conn.interrupt()

    def fork_parent(self) -> None:
        if not self._paused:
            return
        self._paused = False
        checker = self._checker
        if self._closed or self._check_done or (checker is not None and checker.is_alive()):
            return  # done, or its thread had not started the check yet and goes on now
        try:
            self.start_background_check(gate_writes=self._gate_writes)
        except PodStoreError as exc:  # pragma: no cover - the next write checks then
            log.warning("%s: could not restart the integrity check: %s", self.options.path, exc)

    def _close_unused(self) -> None:
        """Close the idle connections and those of threads not inside a call."""
        with self._lock:
            unused, self._idle = self._idle, []
            for slot in list(self._slots):
                if slot.conn is not None and not slot.busy:
                    unused.append(slot.conn)
                    slot.conn = None
            for conn in unused:
                self._conns.discard(conn)
        for conn in unused:
            _close_quietly(conn)

    def fork_child(self, thread: int) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        inherited, self._conns, self._idle = self._conns, set(), []
        in_use: set[int] = set()
        for slot in list(self._slots):
            if slot.conn is not None and slot.busy:
                in_use.add(id(slot.conn))
            if slot.thread != thread:
                slot.busy, slot.depth, slot.owner = 0, 0, None
            slot.conn, slot.queue = None, None
        for conn in inherited:
            if id(conn) in in_use:
                forking.abandon(conn)
            else:
                _close_quietly(conn)  # nobody was using it: see sqlite/forking.py
        checker_conn, self._checker_conn = self._checker_conn, None
        if checker_conn is not None:
            _close_quietly(checker_conn)  # interrupted before the fork (fork_quiesce)
        if self._checker is not None and not self._check_done:
            self._check_here = True
        self._checker = None
        self._paused = False
        if in_use:
            reason = "inside a call or transaction() block (here or in another thread)"
            forking.refuse(self.options.path, reason)
            if not self._closed:
                self._trouble = forking.forked_error(self.options.path, reason)

    # ---- the background integrity check (open(verify="background")) ------------------------

    def start_background_check(self, *, gate_writes: bool = False) -> None:
        """Run ``quick_check`` on a connection of its own in a daemon thread; with
        ``gate_writes`` every write first waits for it to pass (or raises what it found).

        The connection is made here so the thread goes straight into SQLite (no GIL): made
        there, it took the GIL from the caller, and open + first answer took 4-8 ms longer.
        """
        conn = connect(self.options)  # raises like the store's own connection would
        self._gate_writes = gate_writes
        self._checker_conn = conn
        self._checker = _Checker(self._background_check, conn)

    def _background_check(self, conn: sqlite3.Connection) -> None:
        try:
            with forking.activity():
                try:
                    with self._lock:
                        if self._closed or self._paused:  # close() or a fork came first
                            return
                    quick_check(conn)
                except PodStoreError as exc:
                    # close() and fork() interrupt the check: that is not a finding.
                    if not self._closed and not self._paused:
                        log.error("%s: %s", self.options.path, exc)
                        self._found(exc)
                        self._check_done = True
                except sqlite3.Error:
                    pass
                else:
                    self._check_done = True
                finally:
                    with self._lock:
                        if self._checker_conn is conn:
                            self._checker_conn = None
                    _close_quietly(conn)
        except BaseException:  # pragma: no cover - a daemon thread has no one to tell
            log.debug("background check failed", exc_info=True)

    def _found(self, damage: PodStoreError) -> None:
        self._damage = damage
        with self._lock:
            if self._trouble is None:
                self._trouble = damage

    def _stop_check(self) -> None:
        """Stop the background check and wait for its thread; the interrupt is repeated, as it
        reaches only a statement already running."""
        checker = self._checker
        if checker is None or checker.is_current():
            return
        while checker.is_alive():
            with self._lock:
                if self._checker_conn is not None:
                    self._checker_conn.interrupt()
            checker.join(0.002)

    def _join_check(self, timeout: float | None) -> bool:
        """Wait for the check's verdict (False: timed out), across a fork's restart of it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._check_done and not self._closed:
            checker = self._checker
            if checker is None or checker.is_current():
                return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            checker.join(0.05 if remaining is None else min(remaining, 0.05))
            if not checker.is_alive() and checker is self._checker and not self._paused:
                return True  # ended without a verdict (an error that is not damage)
        return True

    def _check_in_this_process(self) -> None:
        """A child forked while the parent's background check ran: check here, once."""
        self._check_here = False
        with self.use() as conn:
            try:
                quick_check(conn)
            except StoreCorruptError as exc:
                log.error("%s: %s", self.options.path, exc)
                self._found(exc)
                raise

    def wait_checked(self, timeout: float | None) -> bool:
        """True once the check passed (or none runs), False on timeout; raises what it found."""
        if self._check_here:
            self._check_in_this_process()
        if not self._join_check(timeout):
            return False
        if self._damage is not None:
            raise self._damage
        return True


class _Use:
    """The context of :meth:`Sessions.use` and, with ``snapshot``, :meth:`Sessions.snapshot`:
    a read transaction unless one is open (a class: every read passes through it)."""

    __slots__ = ("__weakref__", "_began", "_conn", "_gen", "_sessions", "_slot", "_snapshot")

    def __init__(self, sessions: Sessions, snapshot: bool = False) -> None:
        self._sessions = sessions
        self._snapshot = snapshot
        self._began = False

    def __enter__(self) -> sqlite3.Connection:
        sessions = self._sessions
        held = signals.hold()
        try:
            slot = self._slot = sessions._enter()
            conn = slot.conn
            assert conn is not None
            if self._snapshot and not slot.depth and not conn.in_transaction:
                try:
                    conn.execute("BEGIN")
                except sqlite3.Error as exc:
                    sessions._exit(slot)
                    _raise_translated(exc)
                self._began = True
            self._conn, self._gen = conn, STATE.generation
        except BaseException:
            signals.release(held)
            raise
        try:
            signals.release(held)  # an interrupt due meanwhile is raised here
            return conn
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        sessions, slot = self._sessions, self._slot
        held = signals.hold()
        try:
            if self._snapshot and self._gen != STATE.generation:
                # Forked inside: the connection is the parent's.
                sessions._exit(slot)
                raise sessions._forked_inside()
            try:
                if self._began and self._conn.in_transaction:
                    self._conn.execute("COMMIT")
            except sqlite3.Error as error:
                _raise_translated(error)
            finally:
                sessions._exit(slot)
        finally:
            signals.release(held)
        if isinstance(exc, sqlite3.Error):
            _raise_translated(exc)


class _Write(Generic[T]):
    """The context of :meth:`Sessions.write` (a class: fewer Python calls per insert).

    Signal handlers are held off in its steps (``sqlite/signals.py``): an interrupt while it
    begins is raised before the block with nothing open; one while it commits, after the
    commit, noted as committed (:func:`signals.committed`)."""

    __slots__ = (
        "__weakref__",
        "_conn",
        "_gen",
        "_marking",
        "_opened",
        "_savepoint",
        "_sessions",
        "_slot",
        "_value",
    )

    def __init__(self, sessions: Sessions, value: T) -> None:
        self._sessions = sessions
        self._savepoint: str | None = None
        self._marking = False
        self._value = value

    def __enter__(self) -> T:
        held = signals.hold()
        try:
            conn = self._begin()
        except BaseException:
            signals.release(held)
            raise
        try:
            signals.release(held)
            return conn if self._value is None else self._value  # type: ignore[return-value]
        except BaseException as interrupt:
            # Due while the write began: it ends here, rolled back, before the block runs.
            self.__exit__(type(interrupt), interrupt, None)
            raise

    def _begin(self) -> sqlite3.Connection:
        sessions = self._sessions
        slot = sessions._enter()
        conn = slot.conn
        assert conn is not None
        outer = not slot.depth
        try:
            if not outer:
                if not conn.in_transaction:  # SAVEPOINT would begin a transaction of its own
                    raise _ended_by_sqlite()
                # A failing call inside a transaction() block must not leave half of itself
                # behind if the caller catches the error and carries on.
                self._savepoint = name = f"podstore_{slot.depth}"
                conn.execute(f"SAVEPOINT {name}")
            else:
                sessions._joined_elsewhere()
                # A fork in a thread holding this write lock must not wait for this thread.
                slot.counter.waits_for = sessions._file
                try:
                    sessions._begin_write(slot, conn)
                finally:
                    slot.counter.waits_for = None
                if sessions.unmarked:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self._marking = True
                slot.owner = current_task()
                # Those a block interrupted at its end left here (Sessions._unwind) go.
                self._opened = tuple(r for r in _OPEN.get() if getattr(r(), "depth", 0))
                _OPEN.set((*self._opened, weakref.ref(slot)))
            self._slot, self._conn, self._gen = slot, conn, STATE.generation
            slot.depth += 1
        except BaseException as exc:
            self._undo_begin(slot, conn, outer)
            if isinstance(exc, sqlite3.Error):
                _raise_translated(exc)
            raise
        return conn

    def _undo_begin(self, slot: _Slot, conn: sqlite3.Connection, outer: bool) -> None:
        """Undo a begun write after an error, or an interrupt the block did not keep out (one
        delivered to a thread that does not block it runs in the main thread at once)."""
        try:
            if outer and slot.queue is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            elif not outer and self._savepoint is not None and conn.in_transaction:
                name = self._savepoint
                with contextlib.suppress(sqlite3.Error):  # it may not have been made
                    conn.execute(f"ROLLBACK TO {name}")
                    conn.execute(f"RELEASE {name}")
        except sqlite3.Error:
            pass  # the connection's state is checked by its next use
        finally:
            try:
                if outer:
                    slot.owner = None
                    if _OPEN.get() and _OPEN.get()[-1]() is slot:
                        _OPEN.set(_OPEN.get()[:-1])
                    self._sessions._end_write(slot)
            finally:
                self._sessions._exit(slot)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        pending: BaseException | None = None
        try:
            held = signals.hold()
        except BaseException as interrupt:  # due before the hold: the write rolls back
            pending, held = interrupt, signals.hold()
        committed = False
        try:
            try:
                committed = self._end(exc_type is not None or pending is not None)
            finally:
                signals.release(held)
            if pending is not None:
                raise pending
            if isinstance(exc, sqlite3.Error):
                _raise_translated(exc)
        except BaseException as late:
            if committed:  # an interrupt due as it committed, raised now: say so
                late.add_note(signals.COMMITTED)
            raise

    def _end(self, failed: bool) -> bool:
        """Commit (or release the savepoint), or roll back when ``failed``; True once the
        outermost transaction committed."""
        sessions, slot, conn, name = self._sessions, self._slot, self._conn, self._savepoint
        if self._gen != STATE.generation:
            # Forked inside the transaction: this is the child, and the transaction (its
            # connection, its lock) is the parent's. Unwind without touching it.
            slot.depth = max(slot.depth - 1, 0) if name is not None else 0
            sessions._exit(slot)
            raise sessions._forked_inside()
        committed = False
        try:
            if name is not None:
                if conn.in_transaction:
                    if failed:
                        conn.execute(f"ROLLBACK TO {name}")
                    conn.execute(f"RELEASE {name}")
                elif not failed:
                    raise _ended_by_sqlite()
            elif not failed:
                if not conn.in_transaction:
                    raise _ended_by_sqlite()
                try:
                    conn.execute("COMMIT")
                    committed = True
                    if self._marking:
                        sessions.unmarked = False
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error as error:
            _raise_translated(error)
        finally:
            try:
                if name is not None:
                    slot.depth -= 1
                else:
                    slot.depth, slot.owner = 0, None
                    try:
                        _OPEN.set(self._opened)
                    finally:
                        sessions._end_write(slot)
            finally:
                sessions._exit(slot)
        return committed


def _ended_by_sqlite() -> PodStoreError:
    # SQLite rolls a whole transaction back on some errors (a full disk, an I/O error): a
    # block whose call failed so, caught and carried on, must not commit what follows.
    return PodStoreError(
        "the transaction() block was rolled back: SQLite ended its transaction after an "
        "error inside it (such as a full disk); nothing of the block was written"
    )


def _other_task_error() -> PodStoreError:
    return PodStoreError(
        "another asyncio task's transaction() is open on this thread's connection to the "
        "store: this call would silently join it (and be committed or rolled back with it). "
        "Use podstore.AsyncPodStore, whose transactions belong to one task, or keep awaits "
        "out of transaction() blocks"
    )


def _close_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.close()
    except sqlite3.Error:  # pragma: no cover - close errors have nothing to undo
        log.debug("error closing a connection", exc_info=True)


def _raise_translated(exc: sqlite3.Error) -> NoReturn:
    """Raise what translate makes of ``exc`` (the same as translated_errors)."""
    mapped = translate(exc)
    if mapped is None:  # pragma: no cover - every sqlite3 error maps to something
        raise exc
    if type(mapped) is PodStoreError:
        raise mapped from exc
    raise mapped from None
