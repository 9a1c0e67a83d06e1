"""Shipping node stores to the fleet database: the central state of each store equals the
node's, every event arrives once, and the fleet questions answer per store."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.fleetlib import (
    assert_same_state,
    busy_node,
    fleet_event_seqs,
    fleet_events,
    fleet_last_seq,
    node_events,
    rows,
)

from podstore import FleetError, InvalidInputError, PodStore
from podstore.fleet import read
from podstore.fleet.ship import ship


def test_several_busy_nodes_ship_their_exact_state(tmp_path: Path, fleet_url: str) -> None:
    stores = [busy_node(tmp_path / f"n{i}.db", seed=i) for i in range(4)]
    try:
        for i, store in enumerate(stores):
            report = ship(store, fleet_url, node=f"node-{i}", batch_size=7)
            events = node_events(store)
            assert report.shipped == len(events) > 40
            assert report.snapshots == 0 and report.missing == 0
            assert report.last_seq == events[-1][0]
            assert report.batches == -(-len(events) // 7)
        for store in stores:
            assert_same_state(fleet_url, store)
            assert fleet_events(fleet_url, store.store_id) == node_events(store)
        listed = read.nodes(fleet_url).dicts()
        assert [r["node"] for r in listed] == [f"node-{i}" for i in range(4)]
        for row, store in zip(listed, stores, strict=True):
            assert str(row["store_id"]) == store.store_id
            assert row["events"] == len(node_events(store)) == row["last_seq"]
            assert row["device_rows"] == store.stats().device_rows
    finally:
        for store in stores:
            store.close()


def test_shipping_again_sends_nothing_and_then_only_what_is_new(
    tmp_path: Path, fleet_url: str
) -> None:
    store = busy_node(tmp_path / "n.db", seed=7)
    with store:
        first = ship(store, fleet_url, node="n")
        again = ship(store, fleet_url, node="n")
        assert again.shipped == 0 and again.last_seq == first.last_seq
        store.insert("new-pod", "c", "nvidia.com/gpu", {0: ["GPU-new"]}, None)
        store.delete(["pod-1"])
        third = ship(store, fleet_url, node="n")
        assert third.shipped == len(node_events(store)) - first.shipped >= 1
        assert_same_state(fleet_url, store)
        assert fleet_event_seqs(fleet_url, store.store_id) == [e[0] for e in node_events(store)]


def test_double_allocations_are_found_per_store_only(tmp_path: Path, fleet_url: str) -> None:
    # node-a gives GPU-X to two pods; node-b and node-c each give their own GPU-X to one pod.
    stores = [PodStore.open(tmp_path / f"{n}.db") for n in "abc"]
    try:
        a, b, c = stores
        a.insert("p1", "c", "nvidia.com/gpu", {0: ["GPU-X"]}, None)
        a.insert("p2", "c", "nvidia.com/gpu", {1: ["GPU-X"]}, None)
        a.insert("p3", "init", "nvidia.com/gpu", {0: ["GPU-Y"]}, None)
        a.insert("p3", "main", "nvidia.com/gpu", {0: ["GPU-Y"]}, None)  # one pod: legitimate
        b.insert("p1", "c", "nvidia.com/gpu", {0: ["GPU-X"]}, None)
        c.insert("p9", "c", "nvidia.com/gpu", {0: ["GPU-X"]}, None)
        for name, store in zip("abc", stores, strict=True):
            ship(store, fleet_url, node=f"node-{name}")
        found = read.query(
            fleet_url,
            "SELECT node, device_id, pod_uid, pod_count FROM v_fleet_double_allocations "
            "ORDER BY node, pod_uid",
        ).rows
        assert found == [("node-a", "GPU-X", "p1", 2), ("node-a", "GPU-X", "p2", 2)]
        node_view = a.query("SELECT device_id, pod_uid FROM v_double_allocations").rows
        assert sorted(node_view) == [("GPU-X", "p1"), ("GPU-X", "p2")]
        owners = read.owners(fleet_url, "GPU-X").rows
        assert [(r[0], r[2]) for r in owners] == [
            ("node-a", "p1"),
            ("node-a", "p2"),
            ("node-b", "p1"),
            ("node-c", "p9"),
        ]
        assert [r[2] for r in read.owners(fleet_url, "GPU-X", node="node-b").rows] == ["p1"]
        # Once the second pod lets go, node-a is clean too.
        a.delete(["p2"])
        ship(a, fleet_url, node="node-a")
        assert read.query(fleet_url, "SELECT * FROM v_fleet_double_allocations").rows == []
    finally:
        for store in stores:
            store.close()


def test_owners_at_a_past_instant_follow_the_shipped_history(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.audit_fixture import at, clock

    store = PodStore.open(tmp_path / "n.db")
    with store, clock(monkeypatch) as now:
        now[0] = at("10:00")
        store.insert("p1", "c", "gpu", {0: ["G"]}, None)
        now[0] = at("11:00")
        store.insert("p1", "c", "gpu", {0: ["H"]}, None)  # replace: G released
        store.insert("p2", "c", "gpu", {0: ["G"]}, None)
        now[0] = at("12:00")
        store.delete(["p2"])
        ship(store, fleet_url, node="n")
        for when in ("09:00", "10:00", "10:30", "11:00", "11:30", "12:00", "13:00"):
            central = [(r[2], r[3], r[4]) for r in read.owners(fleet_url, "G", at=at(when)).rows]
            assert central == store.owners_at("G", at(when)), when


def test_bad_arguments_and_a_missing_schema_change_nothing(tmp_path: Path, empty_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        store.insert("p", "c", "r", {0: ["d"]}, None)
        with pytest.raises(FleetError, match="fleet init"):
            ship(store, empty_url, node="n")
        with pytest.raises(InvalidInputError):
            ship(store, empty_url, node="")
        with pytest.raises(InvalidInputError):
            ship(store, empty_url, node="n", batch_size=0)
        with pytest.raises(InvalidInputError, match="PostgreSQL"):
            ship(store, "mysql://u@h/db", node="n")
        assert rows(empty_url, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'fleet%'") == [
            (0,)
        ]


def test_a_store_older_than_what_was_shipped_is_refused(tmp_path: Path, fleet_url: str) -> None:
    import shutil

    path = tmp_path / "n.db"
    with PodStore.open(path) as store:
        store.insert("p", "c", "r", {0: ["d"]}, None)
    shutil.copy(path, tmp_path / "old.db")
    with PodStore.open(path) as store:
        store.insert("q", "c", "r", {0: ["e"]}, None)
        ship(store, fleet_url, node="n")
    with PodStore.open(tmp_path / "old.db") as old, pytest.raises(FleetError, match="older copy"):
        ship(old, fleet_url, node="n")
    # Refused by the server, as diverged, and counted.
    assert read.nodes(fleet_url).dicts()[0]["refusals"] == 1
    assert fleet_last_seq(fleet_url, old.store_id) == 2


def test_shipping_status_is_filled_by_every_call(tmp_path: Path, fleet_url: str) -> None:
    from podstore import FleetRefusedError, FleetUnavailableError
    from podstore.fleet.status import ShippingStatus

    status = ShippingStatus()
    assert status.snapshot().last_seq is None and status.snapshot().failures == 0
    with busy_node(tmp_path / "n.db", seed=11) as store:
        report = ship(store, fleet_url, node="n", status=status)
        done = status.snapshot()
        assert (done.last_seq, done.lag_events, done.lag_seconds) == (report.last_seq, 0, 0.0)
        assert (done.successes, done.failures, done.last_error) == (1, 0, None)
        for i in range(3):
            store.insert(f"late-{i}", "c", "nvidia.com/gpu", {0: ["GPU-L"]}, None)
        down = "postgresql://postgres:status-pw@/nowhere?host=/nonexistent-socket-dir"
        with pytest.raises(FleetUnavailableError):
            ship(store, down, node="n", status=status)
        failed = status.snapshot()
        assert (failed.failures, failed.lag_events, failed.last_seq) == (1, 3, report.last_seq)
        assert failed.lag_seconds is not None and 0 <= failed.lag_seconds < 3600
        assert failed.last_error is not None and "status-pw" not in failed.last_error
        with pytest.raises(FleetRefusedError):
            ship(store, fleet_url, node="someone-else", status=status)
        refused = status.snapshot()
        assert (refused.failures, refused.refusals) == (2, 1)
        ship(store, fleet_url, node="n", status=status)
        caught_up = status.snapshot()
        assert (caught_up.lag_events, caught_up.successes, caught_up.last_error) == (0, 2, None)
        assert caught_up.last_seq == node_events(store)[-1][0]


def test_shipping_reads_the_store_through_its_facade_only() -> None:
    # Shipping never opens the store file itself: it reads through PodStore.reader().
    import ast

    import podstore.fleet.ship as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not {m for m in imported if m and m.startswith(("podstore.sqlite", "podstore.storage"))}
    assert "sqlite3" not in imported
