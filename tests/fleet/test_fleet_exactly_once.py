"""Exactly once: a shipper killed with SIGKILL at random moments, and two shippers at once,
never leave a duplicate, a hole, or a state that differs from the events it has."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness.fleetlib import (
    assert_same_state,
    fleet_entries,
    fleet_event_seqs,
    fleet_events,
    fleet_last_seq,
    fleet_registered,
    node_events,
)
from harness.paths import script

from podstore import PodStore, replay_history
from podstore.fleet import read

KILL_ROUNDS = 60


class Shippers:
    """Shipper processes forked on request by tests/harness/ship_child.py."""

    def __init__(self, db: Path, url: str) -> None:
        self.db, self.url = db, url
        self.proc = subprocess.Popen(
            script("ship_child.py"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._line() == "zygote"
        self.reports: list[dict[str, Any]] = []

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, "the shipper zygote died"
        if line.startswith("error"):
            raise AssertionError(line)
        return line

    def spawn(self, node: str = "n", batch: int = 5) -> int:
        """A ready shipper (waiting for SIGUSR1); returns its pid."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{self.db} {self.url} {node} {batch}\n")
        self.proc.stdin.flush()
        while True:
            line = self._line()
            if line.startswith("report "):
                self.reports.append(json.loads(line.removeprefix("report ")))
                continue
            assert line.startswith("ready "), line
            return int(line.split()[1])

    def report(self) -> dict[str, Any]:
        while True:
            line = self._line()
            if line.startswith("report "):
                return dict(json.loads(line.removeprefix("report ")))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.002)
    raise AssertionError(f"shipper {pid} did not die")


def _grow(store: PodStore, rng: random.Random, n: int) -> None:
    with store.transaction():
        for _ in range(n):
            pod = f"pod-{rng.randrange(40)}"
            if rng.random() < 0.15:
                store.delete([pod])
            elif rng.random() < 0.05:
                store.set_registered_devices({"gpu": [f"G{rng.randrange(9)}"]})
            else:
                store.insert(pod, "c", "gpu", {rng.choice([0, 1]): [f"G{rng.randrange(9)}"]}, None)


def _assert_consistent_prefix(url: str, store: PodStore) -> int:
    """What the fleet holds is exactly the node's events 1..last_seq, and the state they make."""
    sid = store.store_id
    last = fleet_last_seq(url, sid)
    assert fleet_event_seqs(url, sid) == list(range(1, last + 1))
    prefix = [e for e in store.history() if e.seq <= last]
    state = replay_history(prefix)
    assert fleet_entries(url, sid) == {
        k: None if v is None else {str(n): ids for n, ids in v.items()}
        for k, v in state.entries.items()
    }
    assert fleet_registered(url, sid) == state.registered
    return last


@pytest.mark.slow
def test_kill_minus_nine_at_random_points_loses_and_duplicates_nothing(
    tmp_path: Path, fleet_url: str
) -> None:
    rng = random.Random(20261203)
    db = tmp_path / "n.db"
    store = PodStore.open(db, durability="normal")
    shippers = Shippers(db, fleet_url)
    killed_midway = 0
    try:
        _grow(store, rng, 100)
        # How long a whole ship of one round's events takes: the window the kills land in.
        pid = shippers.spawn()
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGUSR1)
        shippers.report()
        window = time.perf_counter() - t0
        pid = shippers.spawn()
        for _ in range(KILL_ROUNDS):
            _grow(store, rng, 100)
            before = fleet_last_seq(fleet_url, store.store_id)
            os.kill(pid, signal.SIGUSR1)
            time.sleep(rng.uniform(0, window))
            os.kill(pid, signal.SIGKILL)
            _gone(pid)
            pid = shippers.spawn()  # the next round's, ready while this one is checked
            after = _assert_consistent_prefix(fleet_url, store)
            killed_midway += before < after < node_events(store)[-1][0]
        # Many kills landed between batches or inside one, not only before or after the ship
        # (the window was measured once; a machine that slows down moves kills earlier).
        assert killed_midway >= KILL_ROUNDS // 6, killed_midway
        os.kill(pid, signal.SIGUSR1)
        shippers.report()
        assert fleet_events(fleet_url, store.store_id) == node_events(store)
        assert_same_state(fleet_url, store)
        # The chain the server checked batch by batch is whole, and re-checks from scratch.
        (checked,) = read.verify(fleet_url).dicts()
        assert (checked["chained"], checked["problem"]) == (node_events(store)[-1][0], None)
    finally:
        shippers.close()
        store.close()


def test_two_shippers_at_once_share_the_work_without_overlap(
    tmp_path: Path, fleet_url: str
) -> None:
    rng = random.Random(5)
    db = tmp_path / "n.db"
    with PodStore.open(db, durability="normal") as store:
        shippers = Shippers(db, fleet_url)
        try:
            _grow(store, rng, 1500)
            shipped_before = 0
            for _ in range(3):
                pids = [shippers.spawn("n", 20) for _ in range(2)]
                for pid in pids:
                    os.kill(pid, signal.SIGUSR1)
                reports = [shippers.report() for _ in pids]
                total = len(node_events(store))
                # Together they inserted each new event once, and both saw the same end.
                # (These counts come from RETURNING: a second copy skipped by ON CONFLICT DO
                # NOTHING would not show in them, so they cannot tell a bypassed row lock;
                # test_fleet_ship_lock.py tests the lock itself.)
                assert sum(r["shipped"] for r in reports) == total - shipped_before
                assert {r["last_seq"] for r in reports} == {node_events(store)[-1][0]}
                assert fleet_events(fleet_url, store.store_id) == node_events(store)
                assert_same_state(fleet_url, store)
                assert read.verify(fleet_url).dicts()[0]["problem"] is None
                shipped_before = total
                _grow(store, rng, 700)
        finally:
            shippers.close()
