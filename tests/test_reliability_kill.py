"""kill -9: a writer dies at random moments; every acknowledged call must survive.

The writer (tests/harness/kill_writer.py) runs random podstore operations — inserts, deletes,
transaction blocks (some rolled back on purpose), kubelet restores of up to 90 entries, and
RegisteredDevices replacements — and reports "began i" before and "acknowledged i" after each
call. The test SIGKILLs it after a random delay (some inside PodStore.open; kills inside the
migrations of filled stores are test_reliability_migrate_kill.py's), reopens the store and
checks: integrity_check is ok and the store's
invariants hold (podstore.storage.selfcheck); the contents equal the model of every acknowledged
operation, plus the one in flight either entirely or not at all; then the next writer carries
on from there, and a final write proves the store still works.

PODSTORE_KILLS sets the number of kills (default 200).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from harness import workload
from harness.figures import report
from harness.forkserver import ForkServer

from podstore import PodStore
from podstore.storage.selfcheck import check_connection

KILLS = int(os.environ.get("PODSTORE_KILLS", "200"))
SEED = int(os.environ.get("PODSTORE_KILL_SEED", "20261202"))


def _check_file(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        findings = check_connection(conn)
    finally:
        conn.close()
    assert findings == [], [str(f) for f in findings]


@pytest.mark.slow
def test_kill9_never_loses_an_acknowledged_call(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    rng = random.Random(SEED)
    model = workload.Model()
    next_index = 0
    stats: dict[str, float] = {
        "kills": 0,  # children reaped dead by the SIGKILL the test sent (exit code -9)
        "kills_missed": 0,  # SIGKILL sent to a child that had already exited
        "rounds": 0,
        "acknowledged": 0,
        "in_flight_applied": 0,
        "in_flight_absent": 0,
        "killed_before_open_done": 0,
    }
    started = time.monotonic()
    server = ForkServer()
    try:
        # Bounded, so that kills which never land end the loop and fail the checks below.
        while stats["kills"] < KILLS and stats["rounds"] < 2 * KILLS + 20:
            stats["rounds"] += 1
            # Most rounds run "forever" and are killed; a few finish by themselves first.
            count = rng.randint(1, 6) if rng.random() < 0.05 else 10**6
            server.send(f"run {SEED} {next_index} {count} {db}")
            lines, pid_line = server.until_line("p ")
            pid = int(pid_line.split()[1])
            if rng.random() < 0.2:
                # Early kills land inside PodStore.open (the first ones inside the migration).
                delay = rng.uniform(0, 0.03)
            else:
                # The rest land among the operations, timed from the end of the open.
                more, opened = server.until_line("o")
                lines += [*more, opened]
                delay = rng.uniform(0, 0.06)
            lines += server.lines(time.monotonic() + delay)
            sent = False
            if not any(line in ("d",) or line.startswith("e ") for line in lines):
                with contextlib.suppress(ProcessLookupError):  # it finished just now
                    os.kill(pid, signal.SIGKILL)
                    sent = True
            reaped = [line for line in lines if line.startswith(f"x {pid} ")]
            if not reaped:
                more, exited = server.until_line(f"x {pid} ")
                lines += [*more, exited]
                reaped = [exited]
            errors = [line for line in lines if line.startswith("e ")]
            assert not errors, errors
            code = int(reaped[0].split()[2])
            killed = code == -signal.SIGKILL
            assert killed == sent or (sent and code == 0), f"child exit code {code}"
            stats["kills"] += killed
            stats["kills_missed"] += sent and not killed
            if killed and "o" not in lines:
                stats["killed_before_open_done"] += 1
            began = [int(line.split()[1]) for line in lines if line.startswith("b ")]
            acked = [int(line.split()[1]) for line in lines if line.startswith("a ")]
            assert began == list(range(next_index, next_index + len(began)))
            assert acked == began[: len(acked)] and len(began) - len(acked) in (0, 1)
            for i in acked:
                model.apply(workload.make_op(SEED, i))
            stats["acknowledged"] += len(acked)
            in_flight = began[len(acked) :]
            with PodStore.open(db) as store:
                got = workload.store_state(store)
            if got == model.state():
                if in_flight:
                    stats["in_flight_absent"] += 1
            else:
                assert in_flight, (
                    f"round {stats['rounds']}: acknowledged state lost: "
                    + workload.describe_difference(got, model.state())
                )
                after = model.after(workload.make_op(SEED, in_flight[0]))
                assert got == after.state(), (
                    f"round {stats['rounds']}: op {in_flight[0]} half applied: "
                    + workload.describe_difference(got, after.state())
                )
                model = after
                stats["in_flight_applied"] += 1
            _check_file(db)
            next_index += len(began)
    finally:
        server.close()
    # The store still takes writes, and they read back.
    with PodStore.open(db) as store:
        store.insert("after-the-storm", "c", "example.com/gpu", {0: ["dev-0"]}, b"")
        assert store.container_devices("after-the-storm", "c", "example.com/gpu") == {"dev-0"}
        store.delete(["after-the-storm"])
        assert workload.store_state(store) == model.state()
    _check_file(db)
    stats["operations"] = next_index
    stats["entries_at_end"] = len(model.entries)
    stats["seconds"] = round(time.monotonic() - started, 1)
    report("kill9", seed=SEED, **stats)
    # The kills happened, and where they were meant to: most with a call in flight (the
    # crash under test), some inside PodStore.open.
    assert stats["kills"] >= KILLS, stats
    in_flight = stats["in_flight_applied"] + stats["in_flight_absent"]
    assert in_flight >= KILLS // 2, stats
    assert stats["killed_before_open_done"] >= KILLS // 20, stats
