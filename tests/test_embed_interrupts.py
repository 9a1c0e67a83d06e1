"""An interrupt (Ctrl-C's KeyboardInterrupt, a SIGTERM handler's SystemExit) at any point of a
write or a read never wedges the store nor fakes a write (docs/api.md, "Interrupts, SIGTERM
and cancellation").

Deterministic: a trace hook raises KeyboardInterrupt (or SystemExit, as a SIGTERM handler
would) at the N-th line the session layer runs, for every N of each path: inserts, deletes,
``transaction()`` blocks (also with reads inside and a rolled-back nested block, or rolled
back whole), the first write of a store without podstore's application_id, a write queued
behind another thread's block, and reads. It models a real signal: Python runs a handler
only when the signal is not blocked, so at a line where the main thread blocks SIGINT the
interrupt waits for the first line where it does not (as the kernel keeps the signal
pending). tests/test_embed_signals.py sends real signals at random moments. After each
interrupt: the write committed exactly when the exception says so (``podstore.committed``),
or when it was raised after the call returned; the next write commits (seen by another
connection); no count of calls in flight is left behind (a fork would wait for it).
"""

from __future__ import annotations

import functools
import signal
import sqlite3
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.forks import figures

import podstore
from podstore import PodStore
from podstore.sqlite import connection, forking, sessions, signals

RES = "vendor.com/gpu"
TRACED = {m.__file__ for m in (sessions, forking, signals, connection)}


class Injector:
    """A trace hook raising KeyboardInterrupt at the ``at``-th traced line (counting from 0),
    or at the first one after it where SIGINT is not blocked."""

    def __init__(self, at: int, kind: type[BaseException]) -> None:
        self.at = at
        self.kind = kind
        self.lines = 0
        self.fired = False
        self.inside = False  # the interrupt came from inside a traced line

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename not in TRACED:
            return None
        if event == "line" and not self.fired:
            self.lines += 1
            if self.lines > self.at and not _sigint_blocked():
                self.fired = self.inside = True
                raise self.kind(f"injected at traced line {self.lines}")
        return self


def _sigint_blocked() -> bool:
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())


def _visible(raw: sqlite3.Connection, uids: list[str]) -> list[bool]:
    return [
        raw.execute("SELECT 1 FROM pods WHERE uid = ?", (u,)).fetchone() is not None for u in uids
    ]


def _run(
    store: PodStore, op: Callable[[], object], at: int, kind: type[BaseException]
) -> tuple[bool, BaseException | None]:
    """Run ``op`` with the interrupt due at traced line ``at``: (whether it fired inside op,
    the exception op raised)."""
    inject = Injector(at, kind)
    raised: BaseException | None = None
    sys.settrace(inject)
    try:
        op()
    except kind as exc:
        raised = exc
    finally:
        sys.settrace(None)
    return inject.fired, raised


def _check_healthy(store: PodStore, raw: sqlite3.Connection, probe: str) -> None:
    store.insert(probe, "c", RES, None, b"")
    assert _visible(raw, [probe]) == [True], "a write after the interrupt did not commit"
    slot = store._sessions._local.slot
    assert (slot.busy, slot.depth, forking.counter().n) == (0, 0, 0)
    assert not store._sessions._queue._held, "the turn to write was not passed on"
    assert not slot.conn.in_transaction


class _Abandon(Exception):
    pass


def _paths(store: PodStore) -> dict[str, tuple[Callable[[str], object], int]]:
    """Each path: an operation on fresh pod uid(s), and how many of them it writes (a uid
    ending in ``-x`` is one a path writes and then rolls back: it is never seen)."""

    def block(uid: str) -> None:
        with store.transaction():
            store.insert(uid + "-a", "c", RES, None, b"")
            store.insert(uid + "-b", "c", RES, {0: ["d"]}, b"")

    def block_with_reads_and_a_rolled_back_part(uid: str) -> None:
        with store.transaction():
            store.insert(uid + "-a", "c", RES, None, b"")
            try:
                with store.transaction():  # a savepoint, rolled back
                    store.insert(uid + "-x", "c", RES, None, b"")
                    raise _Abandon
            except _Abandon:
                pass
            store.pods()  # reads inside the block: its own snapshot and use
            store.to_checkpoint_data()
            store.insert(uid + "-b", "c", RES, {0: ["d"]}, b"")

    def abandoned_block(uid: str) -> None:
        try:
            with store.transaction():
                store.insert(uid + "-x", "c", RES, None, b"")
                raise _Abandon
        except _Abandon:
            pass

    def first_write_of_an_unmarked_store(uid: str) -> None:
        store._sessions.unmarked = True  # a store made before podstore set application_id
        store.insert(uid, "c", RES, None, b"")

    def queued_behind_another_thread(uid: str) -> None:
        """The write waits for its turn behind another thread's block (the queue's wait and
        hand-over run on this thread)."""
        inside, done = threading.Event(), threading.Event()
        queue = store._sessions._queue

        def other() -> None:
            with store.transaction():
                store.insert(uid + "-other", "c", RES, None, b"")
                inside.set()
                while not queue._waiters and not done.is_set():
                    time.sleep(0.0005)

        t = threading.Thread(target=other)
        t.start()
        try:
            assert inside.wait(30)
            store.insert(uid, "c", RES, None, b"")
        finally:
            done.set()
            t.join(30)

    return {
        "insert": (lambda uid: store.insert(uid, "c", RES, {0: ["d1"]}, b""), 1),
        "transaction": (block, 2),
        "transaction-with-reads": (block_with_reads_and_a_rolled_back_part, 2),
        "rolled-back-block": (abandoned_block, 0),
        "unmarked-store": (first_write_of_an_unmarked_store, 1),
        "queued-insert": (queued_behind_another_thread, 1),
        "delete": (lambda uid: store.delete([uid]), -1),
        "pods": (lambda uid: store.pods(), 0),
        "snapshot": (lambda uid: store.to_checkpoint_data(), 0),
    }


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_at_every_line_of_the_write_and_read_paths(
    db_path: Path, kind: type[BaseException]
) -> None:
    store = PodStore.open(db_path, durability="normal", verify="off")
    raw = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)
    tried = lost = faked = 0
    for name, (op, writes) in _paths(store).items():
        at = 0
        while True:
            uid = f"{name}-{at}"
            if writes < 0:
                store.insert(uid, "c", RES, None, b"")  # what the delete removes
            uids = [uid] if writes == 1 else [uid + "-a", uid + "-b"] if writes == 2 else []
            fired, exc = _run(store, functools.partial(op, uid), at, kind)
            if not fired:
                break  # past the path's last line
            tried += 1
            # Where was it raised? Inside podstore: the note tells; at the caller: it had
            # returned (the trace hook raises only in traced lines, so always inside here).
            noted = exc is not None and podstore.committed(exc)
            if writes > 0:
                seen = _visible(raw, uids)
                assert seen in ([True] * writes, [False] * writes), (name, at, seen)
                if exc is None or noted:
                    lost += not seen[0]
                else:
                    faked += seen[0]
                assert (exc is None or noted) == seen[0], (name, at, exc, noted, seen)
            elif writes < 0:
                gone = not _visible(raw, [uid])[0]
                assert (exc is None or noted) == gone, (name, at, exc, noted, gone)
            else:
                assert not noted
            assert _visible(raw, [uid + "-x"]) == [False], (name, at)
            # An interrupt at the very entry of __exit__ leaves the block to the exception's
            # frames: it is rolled back once the exception is dropped (docs/api.md).
            del exc
            _check_healthy(store, raw, f"probe-{name}-{at}")
            at += 1
        assert at > 10, (name, at)  # the path was traced
    figures("interrupts", kind=kind.__name__, injected=tried, lost=lost, faked=faked, wedges=0)
    store.close()


def test_an_interrupt_at_every_line_of_recording_end_evidence(db_path: Path) -> None:
    """``record_ends`` (the follower's CRI and file evidence) is a write like the others: an
    interrupt at any line of it, its evidence module's lines included, leaves the end event
    written exactly when the exception says so, and the next write commits."""
    from podstore.storage import ends

    store = PodStore.open(db_path, durability="normal", verify="off")
    raw = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)
    TRACED.add(ends.__file__)
    at = tried = 0
    try:
        while True:
            uid = f"ends-{at}"
            store.insert(uid, "c", RES, {0: ["d1"]}, b"")
            fired, exc = _run(
                store,
                functools.partial(
                    store.record_ends, [(uid, "c", "runtime", "2026-01-01T00:00:00Z")]
                ),
                at,
                KeyboardInterrupt,
            )
            if not fired:
                break
            tried += 1
            noted = exc is not None and podstore.committed(exc)
            (seen,) = raw.execute(
                "SELECT count(*) FROM allocation_events WHERE pod_uid = ? AND op = 'end'",
                (uid,),
            ).fetchone()
            assert seen in (0, 1), (at, seen)
            assert (exc is None or noted) == (seen == 1), (at, exc, noted, seen)
            del exc
            _check_healthy(store, raw, f"probe-ends-{at}")
            at += 1
    finally:
        TRACED.discard(ends.__file__)
    assert tried > 10, tried  # the evidence module's lines were traced too
    store.close()


def test_an_interrupt_while_a_reader_counts_its_call_leaves_no_count(db_path: Path) -> None:
    """A reader's statements (and open, and close) count themselves with
    ``forking.activity()``, outside any signal block: an interrupt at any line of the count
    leaves none behind (a fork would wait for it for the whole busy timeout)."""
    store = PodStore.open(db_path, verify="off")
    store.insert("p", "c", RES, None, b"")
    code = forking.enter.__code__
    tried = 0
    for at in range(100):
        fired = False
        lines = 0

        def inject(frame: types.FrameType, event: str, arg: Any, at: int = at) -> Any:
            nonlocal fired, lines
            if frame.f_code is not code:
                return None
            if event == "line" and not fired:
                lines += 1
                if lines > at:
                    fired = True
                    raise KeyboardInterrupt("injected in forking.enter")
            return inject

        sys.settrace(inject)
        try:
            with store.reader() as reader:
                list(reader.pods())
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if not fired:
            break
        tried += 1
        assert forking.counter().n == 0, at
    assert tried >= 3
    store.close()


@pytest.mark.parametrize("path", ["insert", "transaction"])
def test_an_interrupt_the_signal_block_misses_as_a_write_begins_rolls_it_back(
    db_path: Path, path: str
) -> None:
    """A signal the kernel gave another thread of the process (one that does not block it)
    runs its handler in the main thread even inside podstore's blocked steps: at every line of
    a write's beginning (``_Write._begin``, outermost or a savepoint), such an interrupt ends
    the write rolled back, and the next write commits."""
    store = PodStore.open(db_path, durability="normal", verify="off")
    raw = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)
    code = sessions._Write._begin.__code__
    op = _paths(store)[path][0]
    tried = 0
    for at in range(200):
        fired = False
        lines = 0

        def inject(frame: types.FrameType, event: str, arg: Any, at: int = at) -> Any:
            nonlocal fired, lines
            if frame.f_code is not code:
                return None
            if event == "line" and not fired:
                lines += 1
                if lines > at:
                    fired = True
                    raise KeyboardInterrupt("as if from another thread")
            return inject

        uid = f"{path}-{at}"
        sys.settrace(inject)
        try:
            op(uid)
        except KeyboardInterrupt as exc:
            assert not podstore.committed(exc)
        finally:
            sys.settrace(None)
        if not fired:
            break
        tried += 1
        uids = [uid] if path == "insert" else [uid + "-a", uid + "-b"]
        assert _visible(raw, uids) == [False] * len(uids), (path, at)
        _check_healthy(store, raw, f"probe-{path}-{at}")
    assert tried >= 5, tried
    store.close()


def test_podstores_own_thread_blocks_signals(db_path: Path) -> None:
    """The background check's thread blocks the catchable signals, so the kernel never gives
    it one (the main thread's block would not hold then): read from the kernel's view of the
    thread (/proc/self/task/TID/status, SigBlk)."""
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
    seen: list[int] = []
    started = threading.Event()
    original = sessions.quick_check

    def check(conn: sqlite3.Connection) -> None:
        seen.append(threading.get_native_id())
        with open(f"/proc/self/task/{seen[0]}/status") as f:
            blocked = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
        seen.append(blocked)
        started.set()
        original(conn)

    sessions.quick_check = check
    try:
        store = PodStore.open(db_path, verify="background")
        assert started.wait(30)
        store.close()
    finally:
        sessions.quick_check = original
    blocked = seen[1]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP):
        assert blocked & (1 << (sig - 1)), (sig, hex(blocked))


def test_a_turn_to_write_left_behind_by_an_interrupt_does_not_wedge_the_thread(
    db_path: Path,
) -> None:
    """An interrupt that another thread received (so the main thread's signal block could not
    keep it out) can land between taking the turn to write and recording it, or in the turn's
    release: the thread then still holds the turn. Its next write takes the turn again at once
    instead of waiting for itself until busy_timeout, and passes it on when it ends."""
    with PodStore.open(db_path, busy_timeout=2.0) as store:
        store.insert("before", "c", RES, None, b"")
        queue, slot = store._sessions._queue, store._sessions._local.slot
        assert queue.acquire(0, slot)  # the state a lost release leaves: this slot holds it
        store.insert("after", "c", RES, None, b"")  # StoreBusyError if it waited for itself
        assert not queue._held, "the turn to write was not passed on"
        other: list[BaseException | None] = []

        def write_from_another_thread() -> None:
            try:
                store.insert("other", "c", RES, None, b"")
                other.append(None)
            except BaseException as e:
                other.append(e)

        t = threading.Thread(target=write_from_another_thread)
        t.start()
        t.join(30)
        assert other == [None]
    with PodStore.open(db_path) as store:
        assert store.pods() == {"before", "after", "other"}
