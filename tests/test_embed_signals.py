"""Real signals at random moments while a store writes and reads: no wedge, no acknowledged
write lost, no write faked, no count left behind (docs/api.md, "Interrupts, SIGTERM and
cancellation").

The deterministic counterpart is tests/test_embed_interrupts.py (an interrupt at every line);
this one lets the kernel pick the moment: ``signal.setitimer`` sends SIGALRM 0-400 µs after
each operation starts, and the handler raises ``KeyboardInterrupt`` (Ctrl-C) or
``SystemExit`` (what a SIGTERM handler raises), chosen at random. Operations: inserts,
two-insert ``transaction()`` blocks, deletes, reads, and readers (a new one, and one kept
open across every interrupt, which must stay usable).

What each outcome must mean, as docs/api.md states it:

- the operation returned, or its exception carries ``podstore.committed``: committed;
- the exception was raised inside ``podstore/sqlite/`` without the note, or inside a block's
  body (the ``with`` had not ended): rolled back;
- raised elsewhere (the facade, or the test's own frame, after the call had returned): either
  (counted, not judged).

After every interrupt the thread's next call starts clean: no transaction open, no call
counted, the turn to write passed on, and a probe insert commits (seen by another
connection). At the end, every acknowledged write is in the store after reopening.
Bounded: at most ``ITERATIONS`` operations or ``SECONDS`` of wall time, whichever comes first.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness.forks import figures
from harness.paths import child_env

import podstore
from podstore import PodStore
from podstore.sqlite import forking

RES = "vendor.com/gpu"
ITERATIONS = int(os.environ.get("PODSTORE_SIGNAL_ITERATIONS", "20000"))
SECONDS = float(os.environ.get("PODSTORE_SIGNAL_SECONDS", "15"))
SQLITE_DIR = os.path.dirname(forking.__file__) + os.sep
FACADE = os.path.dirname(podstore.__file__) + os.sep

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="setitimer is POSIX")


class _Alarm:
    """The SIGALRM handler: raises what ``kind`` names (KeyboardInterrupt or SystemExit)."""

    def __init__(self) -> None:
        self.kind: type[BaseException] = KeyboardInterrupt

    def __call__(self, signum: int, frame: types.FrameType | None) -> None:
        raise self.kind("alarm")


@contextmanager
def _alarm_handler() -> Iterator[_Alarm]:
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        yield alarm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _landed(exc: BaseException) -> tuple[str, types.CodeType, int]:
    """Where ``exc`` was raised: "sqlite" (podstore/sqlite/), "facade" (elsewhere in podstore)
    or "caller"; the code and line of that frame."""
    landed: tuple[types.CodeType, int] | None = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is not _Alarm.__call__.__code__:  # the handler's own frame
            landed = (tb.tb_frame.f_code, tb.tb_lineno)
        tb = tb.tb_next
    assert landed is not None
    name = landed[0].co_filename
    where = (
        "sqlite"
        if name.startswith(SQLITE_DIR)
        else "facade"
        if name.startswith(FACADE)
        else "caller"
    )
    return where, *landed


def test_real_signals_at_random_moments(tmp_path: Path) -> None:
    """Run in a process of its own, whose main thread is its only thread: the kernel gives a
    process's signal to any thread that does not block it, and a test runner's own threads
    (pytest-xdist's) do not (docs/api.md: block them in your other threads)."""
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "store.db")],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    figures("real-signals", **got)
    assert got["final_committed"], "the insert after the run did not commit"
    assert got["wedges"] == got["leaks"] == 0, got
    assert got["lost"] == [], got["lost"]
    assert got["faked"] == [], got["faked"]
    assert got["torn"] == [], got["torn"]
    assert got["undeleted"] == [], got["undeleted"]
    # The run tried enough moments to mean something (landing mostly inside calls).
    assert got["interrupts"] >= 200, got


def _run(db_path: Path) -> dict[str, Any]:
    rng = random.Random(os.environ.get("PODSTORE_SIGNAL_SEED") or time.time_ns())
    store = PodStore.open(db_path, durability="normal", verify="off")
    raw = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, isolation_level=None)

    def visible(uid: str) -> bool:
        return raw.execute("SELECT 1 FROM pods WHERE uid = ?", (uid,)).fetchone() is not None

    committed: list[str] = []  # must be there at the end
    rolled_back: list[str] = []  # must never be there
    blocks: list[tuple[str, str]] = []  # all or nothing
    deletes_done: list[str] = []  # must be gone
    tally: dict[str, Any] = dict.fromkeys(
        ("ops", "interrupts", "in_sqlite", "in_facade", "in_caller"), 0
    )
    tally.update(noted=0, returned=0, wedges=0, leaks=0)

    def insert(uid: str) -> list[str]:
        store.insert(uid, "c", RES, {0: ["d"]}, b"")
        return [uid]

    def block(uid: str) -> list[str]:
        blocks.append((uid + "-a", uid + "-b"))
        with store.transaction():  # an interrupt on this line: either (before or after)
            store.insert(uid + "-a", "c", RES, None, b"")
            store.insert(uid + "-b", "c", RES, {0: ["d"]}, b"")
        return [uid + "-a", uid + "-b"]

    first = block.__code__.co_firstlineno
    body = {first + 3, first + 4}  # the block's body: an interrupt there rolls it back
    after = first + 5

    def delete(uid: str) -> list[str]:
        store.delete([uid])
        return []

    def read(uid: str) -> list[str]:
        store.pods()
        store.to_checkpoint_data()
        return []

    reader = store.reader(timeout=60)  # kept across interrupts: it must stay usable

    def read_with_readers(uid: str) -> list[str]:
        with store.reader(timeout=60) as fresh:
            list(fresh.pods())
        list(reader.stream("SELECT uid FROM pods LIMIT 300"))
        return []

    ops: list[tuple[str, Callable[[str], list[str]]]] = [
        ("insert", insert),
        ("insert", insert),
        ("block", block),
        ("delete", delete),
        ("read", read),
        ("reader", read_with_readers),
    ]
    started = time.monotonic()
    with _alarm_handler() as alarm:
        i = 0
        while i < ITERATIONS and time.monotonic() - started < SECONDS:
            i += 1
            name, op = rng.choice(ops)
            uid = f"{name}-{i}"
            if name == "delete":
                store.insert(uid, "c", RES, None, b"")
            alarm.kind = rng.choice((KeyboardInterrupt, SystemExit))
            returned: list[str] | None = None
            exc: BaseException | None = None
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 400e-6))
                    returned = op(uid)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except (KeyboardInterrupt, SystemExit) as caught:
                exc = caught
            tally["ops"] += 1
            written = [uid] if name == "insert" else [uid + "-a", uid + "-b"]
            if exc is None:
                tally["returned"] += 1
                committed.extend(returned or [])
                if name == "delete":
                    deletes_done.append(uid)
                continue
            tally["interrupts"] += 1
            where, code, line = _landed(exc)
            tally[f"in_{where}"] += 1
            in_block = code is block.__code__
            if returned is not None or (in_block and line == after):
                # Raised after the call returned (or its with ended).
                committed.extend(written if in_block else returned or [])
                if name == "delete":
                    deletes_done.append(uid)
            elif podstore.committed(exc):
                tally["noted"] += 1
                if name == "delete":
                    deletes_done.append(uid)
                elif name not in ("read", "reader"):
                    committed.extend(written)
            elif name in ("insert", "block") and (where == "sqlite" or (in_block and line in body)):
                # Inside the session layer, without the note; or in the block's body: rolled
                # back.
                rolled_back.extend(written)
            del exc
            # The next call starts clean, and a write commits.
            probe = f"probe-{i}"
            store.insert(probe, "c", RES, None, b"")
            committed.append(probe)
            slot = store._sessions._local.slot
            if not visible(probe) or slot.conn.in_transaction:
                tally["wedges"] += 1
            if (slot.busy, slot.depth, forking.counter().n, store._sessions._queue._held) != (
                0,
                0,
                0,
                False,
            ):
                tally["leaks"] += 1
            if tally["wedges"] or tally["leaks"]:
                break
    reader.close()
    final = "final"
    store.insert(final, "c", RES, None, b"")
    store.close()
    raw.close()
    with PodStore.open(db_path, readonly=True) as again:
        present = again.pods()
    tally.update(
        seconds=round(time.monotonic() - started, 1),
        final_committed=final in present,
        lost=sorted(set(committed) - present)[:10],
        faked=sorted(set(rolled_back) & present)[:10],
        torn=[b for b in blocks if (b[0] in present) != (b[1] in present)][:10],
        undeleted=sorted(set(deletes_done) & present)[:10],
    )
    return tally


if __name__ == "__main__":
    assert threading.active_count() == 1, threading.enumerate()
    print(json.dumps(_run(Path(sys.argv[1]))))
