"""kill -9 during schema upgrades of filled stores: the old revision or the new, never between.

A node upgrades podstore once per release, and the first open of the new version migrates a
store that holds the node's allocations. Every revision Alembic knows except the head is a
starting point (tests/harness/filled.py: a store of PODSTORE_MIGRATION_ENTRIES entries, default
10,000, built at the head and taken down to each older revision once per session), and both
ways of upgrading are killed: ``PodStore.open`` and the command line's ``podstore migrate
upgrade``. Each round copies the filled file, forks a child from the warm fork server
(tests/harness/kill_writer.py) that upgrades it, and kills it with SIGKILL:

- every other round at a chosen step of the migration's write transaction
  (tests/harness/txwatch.py: the child stops itself there, then is killed) — before BEGIN,
  before any statement inside it, before COMMIT, after COMMIT returned — so even a migration
  of one statement is killed inside;
- the other rounds after a random delay, so kills also land inside long statements (a
  backfill of 10,000 entries) and inside COMMIT itself.

Then the file must be exactly one of two things (harness/filled.outcome): at the old revision
and the old file — its very bytes, or failing that every row of every table, the schema and
sound b-trees (so `podstore verify` finds in it just what it finds in the old file); or
at the head revision, `podstore verify` clean, schema and row counts as a finished upgrade
gives, and every entry exactly as podstore read it before the downgrade (position, NUMA map,
response, the null flags, entries without a response, registered devices). Where the kill
fell decides which: before COMMIT began, the old; after COMMIT returned, the new; during
COMMIT, either. The first round per starting point that left the old revision, and the first
that left it with uncommitted frames in the -wal, are then upgraded to the end by a fresh open
over what the dead child left, and must verify clean with every entry.

PODSTORE_MIGRATION_KILLS sets the number of kills (default 60, split over the starting
revisions and the two ways).
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from harness import filled
from harness.figures import report
from harness.forkserver import ForkServer

from podstore import PodStore
from podstore.sqlite.files import wal_size
from podstore.storage.selfcheck import check_store

KILLS = int(os.environ.get("PODSTORE_MIGRATION_KILLS", "60"))
SEED = int(os.environ.get("PODSTORE_MIGRATION_KILL_SEED", "20261203"))
MODES = ("open", "cli")
STEP_KINDS = ("t", "q", "k", "c")

# Where a kill fell, from the steps the child reported (txwatch.py), and what it may leave.
ALLOWED = {
    "before": {"old"},  # BEGIN IMMEDIATE not yet run
    "inside": {"old"},  # inside the transaction, COMMIT not yet called
    "commit": {"old", "new"},  # inside COMMIT
    "after": {"new"},  # COMMIT returned
}


def _run(
    server: ForkServer, mode: str, db: Path, stop_at: int, delay: float | None
) -> tuple[list[str], int, float]:
    """One child upgrading ``db``: stopped and killed at ``stop_at``, or killed ``delay``
    seconds after it starts, or (both unset) left to finish. Returns its lines, its exit code
    and the seconds from its start to its last line."""
    server.send(f"upgrade {mode} {stop_at} {db}")
    lines, pid_line = server.until_line("p ")  # the child may have said more already
    pid = int(pid_line.split()[1])
    _await(server, lines, ("s", "e "))
    t0 = time.monotonic()
    if stop_at >= 0:
        _await(server, lines, ("z ", "D", "e "))
    elif delay is not None:
        lines += server.lines(t0 + delay, stop=("D", "e "))
    finished = any(line.startswith(("D", "e ")) for line in lines)
    if (stop_at >= 0 or delay is not None) and not finished:
        os.kill(pid, signal.SIGKILL)
    more, exited = server.until_line(f"x {pid} ")
    elapsed = time.monotonic() - t0
    lines += more
    errors = [line for line in lines if line.startswith("e ")]
    assert not errors, errors
    return lines, int(exited.split()[2]), elapsed


def _await(server: ForkServer, lines: list[str], prefixes: tuple[str, ...]) -> None:
    """Read into ``lines`` until one of them starts with one of ``prefixes``."""
    if not any(line.startswith(prefixes) for line in lines):
        more, last = server.until_line(prefixes)
        lines += [*more, last]


def _steps(lines: list[str]) -> list[str]:
    return [line[0] for line in lines if line[:1] in STEP_KINDS and line[1:2] == " "]


def _phase(lines: list[str], kinds: list[str], stop_at: int) -> str:
    if any(line.startswith("z ") for line in lines):
        # stopped just before step stop_at (a "c" step: just after COMMIT returned)
        return {"t": "before", "q": "inside", "k": "inside", "c": "after"}[kinds[stop_at]]
    seen = _steps(lines)
    if not seen:
        return "before"
    return {"t": "inside", "q": "inside", "k": "commit", "c": "after"}[seen[-1]]


def _stop_points(kinds: list[str], rng: random.Random, rounds: int) -> list[int]:
    """Steps to stop at: first one of each kind (so every phase is hit: BEGIN, the first and
    a random statement inside, COMMIT, after COMMIT), then ``rounds - 5`` more at random."""
    inner = [i for i, k in enumerate(kinds) if k == "q"]
    firsts = [kinds.index("t"), inner[0], rng.choice(inner), kinds.index("k"), kinds.index("c")]
    return firsts + [rng.randrange(len(kinds)) for _ in range(max(rounds - 5, 0))]


def _combination(
    server: ForkServer,
    stores: filled.FilledStores,
    start: filled.Start,
    mode: str,
    kills: int,
    tmp: Path,
    rng: random.Random,
) -> dict[str, object]:
    db = tmp / f"round-{start.revision}-{mode}.db"
    # Calibration: one upgrade left to finish gives the steps and the duration.
    filled.copy_store(start.path, db)
    lines, code, seconds = _run(server, mode, db, -1, None)
    assert code == 0, lines
    kinds = _steps(lines)
    assert kinds and kinds[0] == "t" and kinds[-1] == "c", kinds
    assert filled.outcome(db, stores, start) == "new"
    if mode == "cli":
        assert f"D schema at {stores.head} (was {start.revision})" in lines, lines

    stops = _stop_points(kinds, rng, kills // 2 + 1)
    firsts = len(stops) - max(kills // 2 + 1 - 5, 0)  # one stop at each kind of step
    phases: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    confirmed = completed = completed_over_wal = missed = rounds = 0
    child_seconds = check_seconds = 0.0
    while confirmed < kills and rounds < 3 * kills + 10:
        rounds += 1
        filled.copy_store(start.path, db)
        stop_at = stops.pop(0) if stops and (rounds <= firsts or rounds % 2) else -1
        delay = None if stop_at >= 0 else rng.uniform(0, 1.15 * seconds)
        t0 = time.monotonic()
        lines, code, _ = _run(server, mode, db, stop_at, delay)
        t1 = time.monotonic()
        child_seconds += t1 - t0
        phase = _phase(lines, kinds, stop_at)
        if code != -signal.SIGKILL:
            assert code == 0, lines
            missed += 1  # the child finished before the timer
        else:
            confirmed += 1
            phases[phase] += 1
        leftover = wal_size(str(db))  # what the dead child left in its -wal
        got = filled.outcome(db, stores, start)
        where = f"{start.revision}->{stores.head} by {mode}, round {rounds} (stop {stop_at})"
        allowed = ALLOWED[phase] if code == -signal.SIGKILL else {"new"}
        assert got in allowed, f"{where}: killed {phase} the COMMIT, but the file is {got}"
        outcomes[got] += 1
        check_seconds += time.monotonic() - t1
        if got == "old" and (outcomes["old"] == 1 or (leftover and not completed_over_wal)):
            # What the dead child left (a -wal with uncommitted frames, a -shm) must not stop
            # a later upgrade.
            PodStore.open(db).close()
            assert check_store(db) == [], where
            assert filled.api_state(db) == stores.api, where
            completed += 1
            completed_over_wal += bool(leftover)
    assert confirmed >= kills, (confirmed, rounds)
    # Every phase was hit (the stop rounds see to it); the commit phase only by chance.
    for phase in ("before", "inside", "after"):
        assert phases[phase] > 0, (phase, phases)
    return {
        "kills": confirmed,
        "rounds": rounds,
        "timer_fired_after_finish": missed,
        "transaction_steps": len(kinds),
        "upgrade_seconds": round(seconds, 3),
        **{f"killed_{p}": phases[p] for p in ALLOWED},
        "left_old": outcomes["old"],
        "left_new": outcomes["new"],
        "old_then_completed": completed,
        "old_then_completed_over_uncommitted_wal": completed_over_wal,
        "seconds_in_children": round(child_seconds, 1),
        "seconds_checking": round(check_seconds, 1),
    }


@pytest.mark.slow
def test_kill9_during_upgrades_leaves_the_old_or_the_new_revision(
    filled_stores: filled.FilledStores, tmp_path: Path
) -> None:
    started = time.monotonic()
    combinations = [(rev, mode) for rev in filled.old_revisions() for mode in MODES]
    assert combinations, "no revision to upgrade from"
    # at least the five stops that put a kill in every phase (_stop_points)
    per = max(math.ceil(KILLS / len(combinations)), 5)
    rng = random.Random(SEED)
    figures: dict[str, object] = {}
    server = ForkServer()
    try:
        for rev, mode in combinations:
            figures[f"{rev}->{filled_stores.head} {mode}"] = _combination(
                server, filled_stores, filled_stores.starts[rev], mode, per, tmp_path, rng
            )
    finally:
        server.close()
    total = sum(int(f["kills"]) for f in figures.values())  # type: ignore[call-overload]
    report(
        "migration-kill9",
        entries=filled_stores.entries,
        kills=total,
        seconds=round(time.monotonic() - started, 1),
        per_upgrade=figures,
    )
    assert total >= KILLS
