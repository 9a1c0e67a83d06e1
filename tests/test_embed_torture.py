"""kill -9 and fork torture: parents and children writing, forking, closing and reopening one
store at random, some killed with SIGKILL; every acknowledged write survives and the store
verifies clean (docs/reliability.md, "fork").

Each round (tests/harness/fork_torture.py) starts a tree of processes on the same store:
every process has a writer thread beside its main one, forks children (plainly, while its
writer is inside a transaction, while a thread holds a reader's snapshot, from inside a
transaction of its own), closes and reopens the store, and sometimes kills itself; the test
SIGKILLs random processes of the tree meanwhile. A process records a call in its log only
after the call returned. After the round, every acknowledged insert and block must be in the
store with its device, every acknowledged delete gone, no process may have met an unexpected
error, a child forked inside a transaction must have been refused, and ``podstore verify``
must pass. The store carries over from round to round, with whatever the kills left.

CI runs a bounded number of rounds: PODSTORE_TORTURE_ROUNDS (default 16, about 50 s on a loaded
2-core machine; each round is a fresh tree of processes). Set it higher for a longer run, e.g.
PODSTORE_TORTURE_ROUNDS=500.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness.figures import report
from harness.paths import script

from podstore import PodStore
from podstore.storage.selfcheck import check_store

RES = "vendor.com/gpu"
ROUNDS = int(os.environ.get("PODSTORE_TORTURE_ROUNDS", "16"))
ROUND_TIMEOUT = 120.0

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only"),
    pytest.mark.skipif(sys.platform != "linux", reason="the keeper is a Linux subreaper"),
    pytest.mark.slow,
]


@dataclass
class Tally:
    rounds: int = 0
    processes: int = 0
    forks: int = 0
    refused_children: int = 0
    kills_sent: int = 0
    acknowledged: int = 0
    present: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)


def _podstore_verify(db: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "podstore"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "podstore.cli"]
    return subprocess.run(
        [*argv, "--db", str(db), "verify"], capture_output=True, text=True, timeout=120
    )


def _dump_and_kill(pids_file: Path, keeper: subprocess.Popen[bytes]) -> None:
    """A stuck round: every process writes its threads' stacks (faults-PID.txt), then dies."""
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for sig in (signal.SIGUSR1, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(1)
    keeper.kill()
    keeper.wait()


def _round(db: Path, logdir: Path, seed: int, tally: Tally) -> None:
    logdir.mkdir()
    rng = random.Random(seed)
    keeper = subprocess.Popen([*script("fork_torture.py"), "keeper", str(db), str(logdir),
                               str(seed)])  # fmt: skip
    deadline = time.monotonic() + ROUND_TIMEOUT
    pids_file = logdir / "pids"
    first_kill = time.monotonic() + 0.3 + rng.random()
    while keeper.poll() is None:
        if time.monotonic() > deadline:
            _dump_and_kill(pids_file, keeper)
            raise AssertionError(f"round {seed} did not finish in {ROUND_TIMEOUT} s: {logdir}")
        time.sleep(0.05 + rng.random() * 0.3)
        if time.monotonic() > first_kill and rng.random() < 0.3 and pids_file.exists():
            pids = [int(p) for p in pids_file.read_text().split()]
            victim = rng.choice(pids)
            try:
                os.kill(victim, signal.SIGKILL)
                tally.kills_sent += 1
            except ProcessLookupError:
                pass
    keeper.wait()
    tally.rounds += 1

    present: dict[str, str] = {}
    deleted: set[str] = set()
    maybe_deleted: set[str] = set()  # a delete was started but never acknowledged
    for log in sorted(logdir.glob("acks-*.log")):
        tally.processes += 1
        for line in log.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            words = rest.split()
            if kind == "I":
                present[words[0]] = words[1]
            elif kind == "T":
                present.update(zip(words[::2], words[1::2], strict=True))
            elif kind == "D":
                deleted.add(words[0])
            elif kind == "d":
                maybe_deleted.add(words[0])
            elif kind == "F":
                tally.forks += 1
            elif kind == "R":
                tally.refused_children += 1
            elif kind == "E":
                tally.errors.append(f"{log.name}: {rest}")
            if kind in "ITD":
                tally.acknowledged += 1
    with PodStore.open(db, verify="blocking") as store:
        pods = store.pods()
        for pod, dev in present.items():
            if pod in deleted or (pod in maybe_deleted and pod not in pods):
                continue
            assert pod in pods, f"round {seed}: acknowledged {pod} is missing"
            assert store.container_devices(pod, "c", RES) == {dev}, pod
        for pod in deleted:
            assert pod not in pods, f"round {seed}: acknowledged delete of {pod} undone"
    tally.present += len(set(present) - deleted)
    tally.deleted += len(deleted)
    assert not tally.errors, tally.errors[:5]
    errors = [f.message for f in check_store(str(db)) if f.severity == "error"]
    assert errors == [], errors


def test_fork_and_kill_torture(tmp_path: Path) -> None:
    assert ROUNDS > 0, "PODSTORE_TORTURE_ROUNDS must be positive"
    db = tmp_path / "torture.db"
    tally = Tally()
    started = time.monotonic()
    for r in range(ROUNDS):
        _round(db, tmp_path / f"round-{r}", 1000 + r, tally)
    verify = _podstore_verify(db)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report(
        "fork-torture",
        rounds=tally.rounds,
        processes=tally.processes,
        forks=tally.forks,
        refused_children=tally.refused_children,
        kills_sent=tally.kills_sent,
        acknowledged=tally.acknowledged,
        present_at_end=tally.present,
        deleted=tally.deleted,
        seconds=round(time.monotonic() - started, 1),
    )
    assert tally.forks > 0 and tally.acknowledged > 0
