"""History pruned on the node before it was shipped: the gap is found, and a snapshot of the
node's current state heals it, recorded as such."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from harness.audit_fixture import at, clock
from harness.fleetlib import assert_same_state, fleet_event_seqs, node_events

from podstore import PodStore
from podstore.cli import cli
from podstore.fleet import read
from podstore.fleet.ship import ship


def _snapshots(url: str, store_id: str) -> list[tuple[int, int, int, int]]:
    return [
        (int(r[0]), int(r[1]), int(r[2]), int(r[3]))
        for r in read.query(
            url,
            "SELECT after_seq, at_seq, missing_events, entries FROM fleet_snapshots "
            "WHERE store_id = CAST(:s AS uuid) ORDER BY at_seq",
            {"s": store_id},
        ).rows
    ]


def _history(store: PodStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """10:00 p1 takes G1, p2 takes G2; 11:00 p2 is deleted, p1 replaced to G3; 12:00 p3 G2."""
    with clock(monkeypatch) as now:
        now[0] = at("10:00")
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)
        store.set_registered_devices({"gpu": ["G1", "G2", "G3"]})
        now[0] = at("11:00")
        store.delete(["p2"])
        store.insert("p1", "c", "gpu", {0: ["G3"]}, None)
        now[0] = at("12:00")
        store.insert("p3", "c", "gpu", {1: ["G2"]}, None)


def test_pruned_before_the_first_ship(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _history(store, monkeypatch)
        removed = store.prune_history(at("11:30"))
        assert removed > 0
        kept = [e[0] for e in node_events(store)]
        report = ship(store, fleet_url, node="n")
        assert report.snapshots == 1
        assert report.missing == 6 - len([s for s in kept if s <= 6])
        assert_same_state(fleet_url, store)
        # The kept events are history; the snapshot covers the numbers the node lost.
        assert fleet_event_seqs(fleet_url, store.store_id) == kept
        (snap,) = _snapshots(fleet_url, store.store_id)
        assert snap[0] == 0 and snap[1] == 6 and snap[2] == report.missing
        # Shipping goes on normally after it.
        store.insert("p4", "c", "gpu", {0: ["G1"]}, None)
        after = ship(store, fleet_url, node="n")
        assert (after.shipped, after.snapshots) == (1, 0)
        assert_same_state(fleet_url, store)


def test_pruned_between_two_ships_heals_and_owners_restart_from_the_snapshot(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PodStore.open(tmp_path / "n.db") as store, clock(monkeypatch) as now:
        now[0] = at("09:00")
        store.insert("p0", "c", "gpu", {0: ["G9"]}, None)
        ship(store, fleet_url, node="n")  # seq 1 shipped
        now[0] = at("10:00")
        # seq 2: kept (live at the cut): the first event the fleet lacks, which proves the
        # snapshot continues the fleet's chain (test_fleet_hostile_node.py: without it).
        store.insert("pk", "c", "gpu", {0: ["GK"]}, None)
        store.delete(["p0"])  # seq 3: pruned below, never shipped
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)  # seq 4: kept (p1 live at the cut)
        now[0] = at("12:00")
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)  # seq 5
        assert store.prune_history(at("11:00")) == 2  # seq 1 (shipped) and seq 3 (not)
        report = ship(store, fleet_url, node="n")
        assert (report.snapshots, report.missing, report.shipped) == (1, 1, 3)
        assert_same_state(fleet_url, store)
        assert _snapshots(fleet_url, store.store_id) == [(1, 5, 1, 3)]
        # Central history still holds p0's insert of G9; the snapshot says p0 is gone, so at
        # any instant from the snapshot on nobody holds G9 (the node says the same).
        for when in ("12:00", "13:00"):
            assert read.owners(fleet_url, "G9", at=at(when)).rows == []
            assert store.owners_at("G9", at(when)) == []
            central = [(r[2], r[3], r[4]) for r in read.owners(fleet_url, "G2", at=at(when)).rows]
            assert central == store.owners_at("G2", at(when))
        assert [r[2] for r in read.owners(fleet_url, "G9", at=at("09:30")).rows] == ["p0"]


def test_a_kept_event_edited_on_the_node_is_refused_with_its_snapshot(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events a node kept in a gap travel with the snapshot, and their hashes are checked
    there too: one rewritten with sqlite3 (past the append-only trigger) refuses the whole
    snapshot, naming its seq, and nothing of it is written."""
    import sqlite3

    from harness.fleetlib import fleet_event_seqs

    from podstore import FleetRefusedError

    db = tmp_path / "n.db"
    with PodStore.open(db) as store, clock(monkeypatch) as now:
        now[0] = at("09:00")
        store.insert("p0", "c", "gpu", {0: ["G9"]}, None)
        ship(store, fleet_url, node="n")  # seq 1 shipped
        now[0] = at("10:00")
        store.insert("pk", "c", "gpu", {0: ["GK"]}, None)  # seq 2: kept, the fleet's next
        store.delete(["p0"])  # seq 3: pruned below, never shipped
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)  # seq 4: kept
        now[0] = at("12:00")
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)  # seq 5: kept
        assert store.prune_history(at("11:00")) == 2
        sid = store.store_id
    with sqlite3.connect(db) as raw:
        for (name,) in raw.execute(
            "SELECT name FROM sqlite_master "
            "WHERE type = 'trigger' AND tbl_name = 'allocation_events'"
        ).fetchall():
            raw.execute(f"DROP TRIGGER {name}")
        raw.execute("UPDATE allocation_events SET pod_uid = 'someone-else' WHERE seq = 5")
    raw.close()
    with (
        PodStore.open(db, readonly=True, verify="off") as store,
        pytest.raises(FleetRefusedError) as info,
    ):
        ship(store, fleet_url, node="n")
    assert info.value.reason == "diverged" and "seq 5" in str(info.value)
    assert fleet_event_seqs(fleet_url, sid) == [1]
    assert _snapshots(fleet_url, sid) == []


def test_pruned_newest_events_are_a_gap_too(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last events are deletes before the cut: prune removes them, so the log ends below
    # the newest number ever given (nothing after the gap to notice it by).
    with PodStore.open(tmp_path / "n.db") as store, clock(monkeypatch) as now:
        now[0] = at("10:00")
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)
        ship(store, fleet_url, node="n")
        store.insert("p3", "c", "gpu", {0: ["G3"]}, None)  # seq 3: kept, the fleet's next
        store.insert("p4", "c", "gpu", {0: ["G4"]}, None)
        store.delete(["p4"])
        now[0] = at("12:00")
        store.prune_history(at("11:00"))
        assert [e[0] for e in node_events(store)] == [1, 2, 3]
        report = ship(store, fleet_url, node="n")
        assert (report.snapshots, report.missing) == (1, 2)  # seqs 4 and 5: p4 came and went
        assert_same_state(fleet_url, store)


def test_ship_command_reports_the_snapshot(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "n.db"
    with PodStore.open(db) as store:
        _history(store, monkeypatch)
        store.prune_history(at("11:30"))
    result = CliRunner().invoke(cli, ["--db", str(db), "ship", "--to", fleet_url, "--node", "n"])
    assert result.exit_code == 0, result.output
    assert "gap:" in result.output and "snapshot" in result.output
    nodes = CliRunner().invoke(cli, ["fleet", "nodes", "--url", fleet_url, "-o", "json"])
    assert '"snapshots": 1' in nodes.output


def test_the_gap_warning_names_the_url_without_its_password(
    tmp_path: Path,
    fleet_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "gap-pw-0815"
    with_password = fleet_url.replace("postgres@", f"postgres:{secret}@")
    with PodStore.open(tmp_path / "n.db") as store:
        _history(store, monkeypatch)
        store.prune_history(at("11:30"))
        with caplog.at_level("INFO", logger="podstore.fleet"):
            report = ship(store, with_password, node="n")
    assert report.snapshots == 1 and "postgres:***@" in report.url
    assert "pruned before they were shipped" in caplog.text and "postgres:***@" in caplog.text
    assert secret not in caplog.text and secret not in repr(report)


def test_snapshots_are_stamped_when_taken_and_owners_at_agree_across_them(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The case: a snapshot stamped with the time of the newest event it kept (09:00,
    # 12:00 below) stood in for instants before facts the fleet already held, so owners at
    # 12:30 lost p1, whom the earlier snapshot lists.
    with PodStore.open(tmp_path / "n.db") as store, clock(monkeypatch) as now:
        now[0] = at("09:00")
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)  # seq 1
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)  # seq 2
        ship(store, fleet_url, node="n")
        now[0] = at("10:00")
        # Each gap starts after an event kept (live at its cut): the first the fleet lacks,
        # which proves the snapshot continues the fleet's chain.
        store.insert("k1", "c", "gpu", {0: ["GK1"]}, None)  # seq 3
        store.delete(["p2"])  # seq 4
        now[0] = at("10:10")
        store.insert("p9", "c", "gpu", {0: ["G9"]}, None)  # seq 5
        now[0] = at("10:20")
        store.delete(["p9"])  # seq 6
        now[0] = at("11:00")
        store.prune_history(at("10:30"))  # keeps seqs 1 and 3 (p1 and k1 are live)
        first = ship(store, fleet_url, node="n")
        assert (first.snapshots, first.last_seq) == (1, 6)
        now[0] = at("12:00")
        store.insert("p3", "c", "gpu", {0: ["G3"]}, None)  # seq 7
        ship(store, fleet_url, node="n")
        now[0] = at("13:00")
        store.insert("k2", "c", "gpu", {0: ["GK2"]}, None)  # seq 8
        store.delete(["p1"])  # seq 9
        store.insert("p4", "c", "gpu", {0: ["G1"]}, None)  # seq 10
        now[0] = at("13:10")
        store.delete(["p4"])  # seq 11
        now[0] = at("14:00")
        store.prune_history(at("13:30"))  # keeps seqs 3, 7 and 8 (k1, p3, k2 are live)
        second = ship(store, fleet_url, node="n")
        assert (second.snapshots, second.last_seq) == (1, 11)
        stamps = read.query(
            fleet_url,
            "SELECT at_seq, ts FROM fleet_snapshots WHERE store_id = CAST(:s AS uuid) "
            "ORDER BY at_seq",
            {"s": store.store_id},
        ).rows
        assert stamps == [(6, at("11:00")), (11, at("14:00"))]

        def held(device: str, when: str) -> list[str]:
            return [r[2] for r in read.owners(fleet_url, device, at=at(when)).rows]

        assert held("G2", "09:30") == ["p2"]  # shipped before the first gap
        # Inside a gap the fleet knows what was shipped (p2's delete at 10:00 was pruned
        # before it was); from the snapshot on, what the snapshot says.
        assert held("G2", "10:05") == ["p2"]
        assert held("G2", "11:30") == []
        assert held("G1", "10:45") == ["p1"]
        assert held("G1", "12:30") == ["p1"]  # the first snapshot's holder, still there
        assert held("G3", "12:30") == ["p3"]
        # Inside the second gap the fleet knows what was shipped: p1's delete at 13:00 was
        # pruned before it was, so p1 still holds G1 there; from the snapshot on, nobody does.
        assert held("G1", "13:05") == ["p1"]
        assert held("G1", "14:30") == []
        assert held("G3", "14:30") == ["p3"]
        # ... and where the node still knows, the fleet says the same.
        for device, when in (("G3", "14:30"), ("G1", "14:30"), ("G3", "12:30")):
            assert held(device, when) == [k[0] for k in store.owners_at(device, at(when))]
