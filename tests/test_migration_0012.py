"""Revision 0012 (device-seconds of pruned history): down and up on a pruned store. The
downgrade drops the carried seconds and nothing else; the counter then falls back to what the
history keeps, and a prune after the upgrade carries again."""

from __future__ import annotations

from pathlib import Path

from harness.refmodel import table_dump

from podstore import PodStore, check_store
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade
from podstore.storage.sql.intervals import DEVICE_SECONDS

GPU = "nvidia.com/gpu"
UNTIL = "2099-01-01T00:00:00.000000Z"


def _counter(db: Path) -> dict[tuple[str, str], float]:
    with PodStore.open(db) as store:
        rows = store.query(DEVICE_SECONDS, {"until": UNTIL}).rows
    return {(r, ns): round(float(s), 3) for r, ns, s in rows}


def test_down_drops_only_the_carried_seconds_and_up_carries_again(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("gone", "main", GPU, {0: ["G0"]}, b"")
        store.insert("held", "main", GPU, {0: ["G1"]}, b"")
        store.delete(["gone"])
        before = store.query(DEVICE_SECONDS, {"until": UNTIL}).rows
        assert store.prune_history(UNTIL) > 0
        carried = store.query("SELECT resource, namespace FROM device_seconds_pruned").rows
        assert carried == [(GPU, "")]
        assert store.query(DEVICE_SECONDS, {"until": UNTIL}).rows == before
    head = table_dump(db)

    run_downgrade(ConnectOptions(path=str(db)), "0011")
    down = table_dump(db)
    assert "device_seconds_pruned" not in down
    for name in set(head) - {"alembic_version", "device_seconds_pruned"}:
        assert down[name] == head[name], name

    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert check_store(db) == []
    after = _counter(db)
    assert after[(GPU, "")] < round(float(before[0][2]), 3)  # the carry went with the downgrade
    with PodStore.open(db) as store:
        store.delete(["held"])
        counted = store.query(DEVICE_SECONDS, {"until": UNTIL}).rows
        store.prune_history(UNTIL)
        assert store.query(DEVICE_SECONDS, {"until": UNTIL}).rows == counted
