"""kill -9 of ``podstore watch`` at random moments: no event is ever lost or written twice
relative to the files it applied, and the store always passes ``podstore verify``.

Each round starts the real command (forked from a warm fork server,
tests/harness/watch_follower.py), replaces the checkpoint by rename zero to three times at
random moments — some while the start-up sync runs, some while an event-driven sync runs — and
SIGKILLs the follower — after a random delay, once it holds the last file, or while it is
stopped (SIGSTOP) behind a rewrite, a third of the rounds each, so that kills land both behind
and caught up whatever the machine's load. Then, on the store as the kill left it: the events
written since the last round are exactly the differences between the last state applied and a
sequence of the files written this round, ending in the store's state (each file wholly
applied or not at all; none applied twice); the store's content equals that last file; the
self-check finds no error. The next round's start-up sync catches up from the file.

PODSTORE_WATCH_KILLS sets the number of rounds (default 110).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from harness.figures import report
from harness.forkserver import ForkServer
from harness.watch_support import (
    State,
    canonical_event,
    checkpoint_path,
    expected_events,
    file_state,
    mutate,
    normal,
    random_state,
    store_state,
)

from podstore import InvalidInputError, PodStore, PodStoreError, SchemaError
from podstore.storage.selfcheck import check_connection

ROUNDS = int(os.environ.get("PODSTORE_WATCH_KILLS", "110"))
SEED = int(os.environ.get("PODSTORE_WATCH_KILL_SEED", "20261203"))


def explained(
    events: list[Any], start: State, written: list[State], end: Any
) -> tuple[int, int] | None:
    """If ``events`` are exactly the differences along ``start`` → (some of ``written``, in
    order, each once) ending in a state equal to ``end``: (the index in ``[start, *written]``
    of the last file applied, how many were applied); None if no such sequence exists."""
    chain = [start, *written]

    def walk(at: int, pos: int, jumps: int) -> tuple[int, int] | None:
        if pos == len(events) and file_state(chain[at]) == end:
            return at, jumps
        for nxt in range(at + 1, len(chain)):
            step = expected_events(chain[at], chain[nxt])
            if step and normal(events[pos : pos + len(step)]) != step:
                continue
            # An identical file writes nothing: it may have been applied silently.
            found = walk(nxt, pos + len(step), jumps + 1)
            if found is not None:
                return found
        return None

    return walk(0, 0, 0)


def _errors(db: Path) -> list[str]:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return [str(f) for f in check_connection(conn) if f.severity == "error"]
    finally:
        conn.close()


def _wait_until_holds(db: Path, state: State) -> None:
    """Until the store at ``db`` holds ``state`` (the follower has caught up with the file)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with PodStore.open(db, readonly=True, verify="off") as store:
                if store_state(store) == file_state(state):
                    return
        except PodStoreError:
            pass  # the store is still being created
        time.sleep(0.02)
    raise AssertionError("the follower did not catch up with the file in 120 s")


@pytest.mark.slow
def test_kill9_never_loses_or_duplicates_an_event(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "store.db"
    applied = State(None, None)  # what the store holds: nothing yet
    current = random_state(rng, 60)
    current.write(cp)
    seq = 0
    stats = {
        "rounds": 0,
        "kills": 0,
        "files": 0,
        "applied": 0,
        "behind_after_kill": 0,
        "before_schema": 0,
    }
    started = time.monotonic()
    server = ForkServer("watch_follower.py")
    try:
        for _ in range(ROUNDS):
            stats["rounds"] += 1
            # The file on disk when the round begins: the start-up sync applies it if an
            # earlier round died before doing so.
            written: list[State] = [current]
            if rng.random() < 0.5:
                current = mutate(rng, current, rng.randint(1, 40))
                current.write(cp)
                written.append(current)
            server.send(f"run {db} {cp}")
            pid = int(server.until_line("p ")[1].split()[1])
            # Where the kill lands is chosen, not left to the machine's speed: at a random
            # moment; once the store holds the last file; or with the follower stopped behind
            # a rewrite it cannot have read.
            mode = ("random", "caught_up", "stopped")[stats["rounds"] % 3]
            if mode == "stopped":
                os.kill(pid, signal.SIGSTOP)
            for _ in range(rng.randint(1 if mode == "stopped" else 0, 3)):
                time.sleep(rng.uniform(0, 0.04))
                current = mutate(rng, current, rng.randint(1, 40))
                current.write(cp)
                written.append(current)
            if mode == "caught_up":
                _wait_until_holds(db, current)
            elif mode == "random":
                time.sleep(rng.uniform(0, 0.05))
            os.kill(pid, signal.SIGKILL)
            code = int(server.until_line(f"x {pid} ")[1].split()[2])
            assert code == -signal.SIGKILL, f"the follower exited by itself ({code})"
            stats["kills"] += 1
            stats["files"] += len(written) - 1

            try:
                store = PodStore.open(db, readonly=True, verify="off")
            except (InvalidInputError, SchemaError):
                stats["before_schema"] += 1  # killed while the store was being created
                assert seq == 0
                continue
            with store:
                history = store.history()
                end = store_state(store)
            assert _errors(db) == []
            events = normal([canonical_event(e) for e in history if e.seq > seq])
            steps = explained(events, applied, written, end)
            assert steps is not None, (
                f"round {stats['rounds']}: {len(events)} events are not whole files applied "
                f"once each, in order"
            )
            last, jumps = steps
            applied = [applied, *written][last]
            assert file_state(applied) == end
            if history:
                seq = history[-1].seq
            stats["applied"] += jumps
            if file_state(applied) != file_state(current):
                stats["behind_after_kill"] += 1
    finally:
        server.close()
    # The next start catches up with the last file, once.
    with PodStore.open(db) as store:
        store.sync_checkpoint(cp)
        assert store_state(store) == file_state(current)
        assert store.sync_checkpoint(cp).result == "unchanged"
    assert _errors(db) == []
    stats["seconds"] = round(time.monotonic() - started, 1)
    report("watch-kill9", seed=SEED, **stats)
    assert stats["kills"] >= min(ROUNDS, 100)
    # Kills landed both before and after syncs caught up (else the timing tests nothing).
    assert 0 < stats["behind_after_kill"] < stats["kills"]
