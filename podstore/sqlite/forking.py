"""fork() safety for every connection podstore holds (docs/api.md, "Threads, processes and
fork"; docs/design.md, "fork() is made safe, or refused").

A child inherits SQLite's per-process record of its POSIX locks but not the locks, so its
connection beside an inherited one takes no kernel lock (the parent's last close then deletes
the WAL it writes to); and SQLite's mutexes are copied as other threads left them (a child
forked while a thread was inside SQLite can hang).

- Before the fork, calls count themselves in their thread's :class:`Counter`; new ones wait,
  the background check is interrupted, and the fork waits for calls in flight (at most the
  longest busy_timeout). The parent keeps its connections: closing the idle ones made the
  fork 0.7 ms slower and the next call reconnect (3.1 ms instead of 0.9 ms).
- In the child, connections no thread was using are closed (that releases no kernel lock,
  and SQLite checkpoints at close only under a real exclusive lock, which the parent
  refuses). One in use is abandoned, never closed (its rollback could rewrite the WAL index
  the parent's writer uses) and its file refused.
- In any child the first connection to a file is checked against the kernel's locks
  (``sqlite/posixlocks.py``): none means an unmanaged connection was open; the file is refused.

The hand-off relies on the GIL: a thread raises its count then reads :attr:`State.pending`;
the forking thread sets it then reads the counts; at least one sees the other.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from podstore.errors import PodStoreError
from podstore.sqlite import posixlocks

log = logging.getLogger("podstore")

#: A fork's longest wait for calls in flight when no open store names a busy_timeout.
DEFAULT_WAIT = 10.0


class State:
    """``generation``: forks since start (a connection of another generation is another
    process's); ``pending``: a fork is being prepared."""

    __slots__ = ("generation", "pending")

    def __init__(self) -> None:
        self.generation = 0
        self.pending = False


STATE = State()


class Participant:
    """An owner of connections (a store's sessions, a reader) taking part in forks; by
    default it holds no fork up and has nothing to resume."""

    def fork_timeout(self) -> float | None:
        """How long a fork may wait for calls in flight on its connections (busy_timeout)."""
        return None

    def fork_writing(self, thread: int) -> object:
        """The file (:func:`file_key`) whose write lock ``thread`` holds here, or None."""
        return None

    def fork_quiesce(self) -> None:
        """Before the fork: stop long work (the background check) that would hold it up."""

    def fork_parent(self) -> None:
        """After the fork, in the parent: resume what fork_quiesce stopped."""

    def fork_child(self, thread: int) -> None:
        """In the child, before any other code: deal with what was open at the fork."""


class Counter:
    """``n``: the podstore calls one thread is inside (a fork waits for other threads' to
    reach 0); ``waits_for``: the file whose write lock the thread waits for."""

    __slots__ = ("__weakref__", "n", "waits_for")

    def __init__(self) -> None:
        self.n = 0
        self.waits_for: object = None


_local = threading.local()
_counters: weakref.WeakValueDictionary[int, Counter] = weakref.WeakValueDictionary()


def counter() -> Counter:
    """This thread's counter (dropped with the thread's other thread-local state)."""
    c: Counter | None = getattr(_local, "counter", None)
    if c is None:
        c = _local.counter = Counter()
        with _registry_lock:
            _counters[threading.get_ident()] = c
    return c


def enter(c: Counter) -> None:
    """Count one call of this thread; an outer one waits while a fork is being prepared."""
    if c.n:
        c.n += 1
        return
    while True:
        c.n = 1
        if not STATE.pending:
            return
        c.n = 0
        with _cond:  # until the fork being prepared has happened
            while STATE.pending:
                _cond.wait(0.05)


def leave(c: Counter) -> None:
    c.n -= 1
    if STATE.pending and not c.n:
        with _cond:  # a use ended: the forking thread looks again
            _cond.notify_all()


class activity:  # lower case: used like contextlib.suppress
    """``with forking.activity():`` around podstore work on SQLite that is not a store call
    (opening, closing, a reader's statements, the background check)."""

    __slots__ = ("_c",)

    def __enter__(self) -> None:
        c = self._c = counter()
        n = c.n
        try:
            enter(c)
        except BaseException:
            c.n = n  # interrupted inside enter(): the with never ran, nor will its __exit__
            raise

    def __exit__(self, *exc: object) -> None:
        leave(self._c)


_registry: weakref.WeakSet[Participant] = weakref.WeakSet()
_registry_lock = threading.Lock()
_cond = threading.Condition()
_fork_lock = threading.Lock()
# Files a child may not use, by (st_dev, st_ino), and why; files whose lock was checked.
_refused: dict[tuple[int, int], str] = {}
_verified: set[tuple[int, int]] = set()
# Connections abandoned in a child: referenced for ever, so that they are never closed.
_abandoned: list[object] = []
# Threads inside os.fork() (preparing it, or waiting for another thread's fork to happen).
_forking: set[int] = set()


def register(participant: Participant) -> None:
    with _registry_lock:
        _registry.add(participant)


def _participants() -> list[Participant]:
    with _registry_lock:
        return list(_registry)


def abandon(conn: object) -> None:
    """Keep ``conn`` alive for the rest of the process, through interpreter shutdown too."""
    import ctypes

    _abandoned.append(conn)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


def file_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def refuse(path: str, reason: str) -> None:
    """From now on, this process may not use the file at ``path`` (see :func:`check_usable`)."""
    key = file_key(path)
    if key is not None:
        _refused.setdefault(key, reason)


def forked_error(path: str, reason: str) -> PodStoreError:
    return PodStoreError(
        f"{path}: this process was forked {reason}; the connection belongs to the parent, and "
        "SQLite's locks cannot be shared with it, so this process cannot use the store "
        "(fork outside transaction() blocks, or open the store in the child of a process "
        "that had none in use: docs/api.md, 'Threads, processes and fork')"
    )


def check_usable(path: str) -> None:
    """Raise PodStoreError when this (forked) process may not use the file at ``path``."""
    if not _refused:
        return
    key = file_key(path)
    reason = _refused.get(key) if key is not None else None
    if reason is not None:
        raise forked_error(path, reason)


def verify_locks(path: str, has_lock: bool) -> None:
    """In a forked child, after a connection read ``path`` (``has_lock``: WAL keeps a SHARED
    lock): no kernel lock means an unmanaged connection was open at the fork; refuse it."""
    key = file_key(path)
    if key is None or key in _verified or not has_lock:
        return
    locks = posixlocks.held(path)
    if locks is not None and not locks:
        reason = "while a connection to this file that podstore does not manage was open"
        _refused.setdefault(key, reason)
        raise forked_error(path, reason)
    _verified.add(key)


def _busy_elsewhere(me: int, held: set[object]) -> bool:
    """Whether another thread is in a call the fork must wait for: not one forking itself,
    nor one waiting for a write lock ``me`` holds (the child refuses that store anyway)."""
    with _registry_lock:
        counters = list(_counters.items())
    return any(
        c.n and ident != me and ident not in _forking and c.waits_for not in held
        for ident, c in counters
    )


def _before() -> None:
    me = threading.get_ident()
    # A thread that forks while another thread's fork is being prepared waits here, perhaps
    # inside a call of its own: the other fork must not wait for that one.
    _forking.add(me)
    _fork_lock.acquire()
    STATE.pending = True
    participants = _participants()
    for p in participants:
        p.fork_quiesce()
    timeouts = [t for t in (p.fork_timeout() for p in participants) if t is not None]
    limit = max(timeouts, default=DEFAULT_WAIT)
    held = {p.fork_writing(me) for p in participants} - {None}
    started = time.monotonic()
    with _cond:
        while _busy_elsewhere(me, held):
            # Every round: an interrupt reaches only a statement already running.
            for p in participants:
                p.fork_quiesce()
            remaining = limit - (time.monotonic() - started)
            if remaining <= 0:
                log.warning(
                    "fork: a podstore call or transaction() block in another thread was still "
                    "running after %.1f s; the child will refuse that store",
                    time.monotonic() - started,
                )
                break
            _cond.wait(min(remaining, 0.005))


def _after_in_parent() -> None:
    _forking.discard(threading.get_ident())
    STATE.pending = False
    with _cond:
        _cond.notify_all()
    _fork_lock.release()
    for p in _participants():
        try:
            p.fork_parent()
        except Exception:  # pragma: no cover - the parent carries on regardless
            log.debug("fork: error resuming after the fork", exc_info=True)


def _after_in_child() -> None:
    global _registry_lock, _cond, _fork_lock
    # Locks another thread held at the fork stay held for ever in the child: new ones.
    _registry_lock = threading.Lock()
    _cond = threading.Condition()
    _fork_lock = threading.Lock()
    STATE.generation += 1
    STATE.pending = False
    _verified.clear()
    _forking.clear()
    me = threading.get_ident()
    with _registry_lock:
        for ident, c in list(_counters.items()):
            if ident != me:
                c.n = 0  # threads that do not exist here
    for p in _participants():
        try:
            p.fork_child(me)
        except Exception:  # pragma: no cover - nothing in the child may stop the fork
            log.debug("fork: error in a child's clean-up", exc_info=True)


# concurrent.futures' before-fork handler holds every executor's submit() lock until after the
# fork. Handlers run in reverse order of registration: imported first, it runs after ours, so
# our wait never holds that lock and the blocks waited for can still end.
import concurrent.futures.thread  # noqa: E402,F401

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
