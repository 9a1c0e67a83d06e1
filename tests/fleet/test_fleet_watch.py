"""``podstore watch --ship-to``: a real follower ships every applied sync to a real PostgreSQL,
keeps syncing locally while the server is down, and catches up when it is back."""

from __future__ import annotations

import random
import signal
import subprocess
from pathlib import Path

from harness.fleetlib import assert_same_state, fleet_events, node_events
from harness.pgserver import PgServer
from harness.watch_support import (
    checkpoint_path,
    file_state,
    mutate,
    podstore_command,
    random_state,
    store_state,
    wait_for,
)

from podstore import PodStore, PodStoreError

SECRET = "Wh0le-Secret-77"


def _in_step(db: Path, url: str) -> bool:
    try:
        store = PodStore.open(db, readonly=True)
    except PodStoreError:  # the follower is still creating the store
        return False
    with store:
        return fleet_events(url, store.store_id) == node_events(store)


def test_watch_ships_each_sync_and_catches_up_after_an_outage(
    tmp_path: Path, fleet_url: str, pg: PgServer
) -> None:
    db = tmp_path / "node.db"
    cp = checkpoint_path(tmp_path)
    rng = random.Random(13)
    state = random_state(rng, 6)
    state.write(cp)
    url = fleet_url.replace("postgres@", f"postgres:{SECRET}@")  # trust auth ignores it
    log_path = tmp_path / "watch.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*podstore_command(), "--db", str(db), "watch", str(cp),
             "--ship-to", url, "--node", "node-7", "--interval", "0.5"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            # Start: the first sync, then the history shipped.
            wait_for(lambda: _in_step(db, fleet_url), 30, step=0.1)

            # A change while the server runs: applied and shipped.
            state = mutate(rng, state, 3)
            state.write(cp)
            wait_for(lambda: _in_step(db, fleet_url), 30, step=0.1)

            # The server goes down: local syncs go on, nothing is lost.
            pg.stop()
            try:
                for _ in range(2):
                    state = mutate(rng, state, 3)
                    state.write(cp)

                    def applied() -> bool:
                        with PodStore.open(db, readonly=True) as store:
                            return store_state(store) == file_state(state)  # noqa: B023

                    wait_for(applied, 15, step=0.05)
                assert proc.poll() is None, log_path.read_text()
            finally:
                pg.start()

            # Back up: the backoff retries until PostgreSQL holds every event, once.
            wait_for(lambda: _in_step(db, fleet_url), 90, step=0.2)
            with PodStore.open(db, readonly=True) as store:
                assert_same_state(fleet_url, store)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    assert code == 0, text
    assert SECRET not in text
    assert "postgres:***@" in text  # the outage was logged, masked
    # The start line names the shipping once, its brackets balanced (it said "(node …,
    # shipping (ship to …))").
    (start,) = [line for line in text.splitlines() if "following" in line]
    assert "(node node-" in start and "; ship to postgresql://postgres:***@" in start, start
    assert start.count("(") == start.count(")") and "))" not in start, start
