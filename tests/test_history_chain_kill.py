"""kill -9 while a child writes and prunes: the history chain always verifies afterwards.

The kill harness (test_reliability_kill.py) checks every acknowledged call and ``podstore
verify`` (which checks the chain) after kills inside inserts, imports and transactions; its
workload does not prune. Here a child process loops over inserts that replace and release
devices, deletes, bulk restores, and ``prune_history`` calls that remove the middle and the
newest events (so links are written and read), and is killed at a random moment. After each
kill the file must pass ``check_store`` — its chain included — and the next child continues
from whatever the dead one left, so later rounds chain from links written by earlier ones.

PODSTORE_CHAIN_KILLS sets the number of kills (default 12).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from podstore import PodStore, check_store

KILLS = int(os.environ.get("PODSTORE_CHAIN_KILLS", "12"))

CHILD = r"""
import random, sys
from datetime import datetime, timedelta, UTC
from podstore import PodStore, PodDevicesEntry
db, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
with PodStore.open(db, durability="normal") as store:
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        roll = rng.random()
        pod = f"p{rng.randrange(40)}"
        if roll < 0.55:
            store.insert(pod, "c", "gpu", {0: [f"G{rng.randrange(60)}"]}, None)
        elif roll < 0.7:
            store.delete([pod])
        elif roll < 0.8:
            store.from_checkpoint_data([
                PodDevicesEntry(f"p{k}", "c", "gpu", {0: [f"G{rng.randrange(60)}"]}, b"")
                for k in range(rng.choice([3, 70]))
            ])
        else:
            ahead = rng.choice([-0.05, 0.0, 1.0])  # keep the newest, or prune them too
            store.prune_history(datetime.now(UTC) + timedelta(seconds=ahead))
"""


def test_kill9_during_writes_and_prunes_leaves_a_chain_that_verifies(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    PodStore.open(db).close()
    rng = random.Random(20261204)
    started = time.monotonic()
    events_seen: list[int] = []
    for kill in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db), str(kill)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
        findings = check_store(db)
        assert findings == [], (kill, findings)
        with PodStore.open(db) as store:
            report_ = store.verify_history()
            assert report_.ok, report_.breaks
            events_seen.append(report_.head_seq)
    assert events_seen == sorted(events_seen) and events_seen[-1] > KILLS
    links = _links(db)
    print(
        f"history chain kill -9: {KILLS} kills, head seq {events_seen[-1]}, {links} links, "
        f"{time.monotonic() - started:.1f} s"
    )
    assert links > 0, "no prune left a link: the test did not exercise them"


def _links(db: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM history_chain_links").fetchone()[0])
    finally:
        conn.close()
