"""Device spans (revision 0006) under prune_history: closed spans go with their events.

A span names the event that listed a device and the one that ended the list; once
prune_history has removed both, nothing can show it (``allocation_event_devices`` shows kept
events only) and the row must go, or the table grows with every replace forever. A span with
one end still kept stays: it is how that event names the device.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from podstore import PodStore, check_store

RES = "example.com/gpu"

_DEAD = """
    SELECT count(*) FROM allocation_device_spans s
    WHERE s.until_seq IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = s.since_seq)
      AND NOT EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = s.until_seq)
"""


def _count(path: Path, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def test_prune_removes_the_spans_whose_events_are_both_gone(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        for i in range(10):
            store.insert(f"p{i}", "c", RES, {0: [f"a{i}", f"b{i}"]}, None)
        for i in range(10):
            store.insert(f"p{i}", "c", RES, {0: [f"b{i}", f"c{i}"]}, None)  # releases a{i}
        store.delete([f"p{i}" for i in range(5)])  # ends b{i}, c{i} of p0..p4
        cut = datetime.now(UTC) + timedelta(microseconds=1)
        store.insert("late", "c", RES, {0: ["a0"]}, None)
        spans_before = _count(db, "SELECT count(*) FROM allocation_device_spans")
        assert spans_before == 10 * 2 + 10 * 2 + 1
        # The replaces of p5..p9 stay (the state at the cut); the other 20 events go.
        assert store.prune_history(cut) == 20
        assert _count(db, _DEAD) == 0
        # Left: p5..p9's spans of their insert (ended by the kept replace, which names the
        # devices through them) and of their replace (open), and late's. p0..p4's spans had
        # both their events pruned.
        assert _count(db, "SELECT count(*) FROM allocation_device_spans") == 5 * 2 * 2 + 1
        assert [(e.op, e.pod_uid) for e in store.history(device_id="a0")] == [("insert", "late")]
        shown = [(e.op, e.pod_uid, e.released) for e in store.history(device_id="a7")]
        assert shown == [("replace", "p7", ["a7"])]
        assert store.owners_at("b7", datetime.now(UTC)) == [("p7", "c", RES)]
        store.insert("p7", "c", RES, {0: ["z"]}, None)  # ends p7's spans after the prune
        shown = [(e.op, e.pod_uid, e.released) for e in store.history(device_id="b7")]
        assert shown == [("replace", "p7", ["a7"]), ("replace", "p7", ["b7", "c7"])]
        assert store.verify_history().ok
    assert check_store(db) == []
