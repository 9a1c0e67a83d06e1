"""End evidence (node revision 0010, fleet f0007) ships in the chain like any event: exactly
once, the fleet re-checks its hash, lists no device for it, and the device state it holds is
the node's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.fleetlib import assert_same_state, fleet_event_seqs, rows

from podstore import PodStore
from podstore.checkpoint import PodName
from podstore.fleet import read
from podstore.fleet.ship import ship


def test_end_events_ship_once_and_verify(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        store.set_pod_names({"p1": PodName("ns", "a")})
        store.insert("p1", "c", "nvidia.com/gpu", {0: ["G1"]}, b"")
        assert store.record_ends([("p1", "c", "runtime", "2030-01-01T00:00:00Z")]) == 1
        ship(store, fleet_url, node="node-1")
        store.delete(["p1"])
        # Evidence from before the holding began ends nothing: no event, nothing to ship.
        assert store.record_ends([("p1", None, "pod-logs", "2020-01-01T00:00:00Z")]) == 0
        ship(store, fleet_url, node="node-1")
        seqs = [e.seq for e in store.history()]
        assert fleet_event_seqs(fleet_url, store.store_id) == seqs
        assert_same_state(fleet_url, store)
        shipped = rows(
            fleet_url,
            "SELECT op, device_ids_text, cardinality(devices) FROM fleet_events "
            "WHERE store_id = CAST(:s AS uuid) AND op = 'end'",
            {"s": store.store_id},
        )
        assert shipped == [("end", '{"at":"2030-01-01T00:00:00.000000Z","source":"runtime"}', 0)]
        (checked,) = read.verify(fleet_url).dicts()
        assert (checked["chained"], checked["problem"]) == (seqs[-1], None)
        assert ship(store, fleet_url, node="node-1").shipped == 0


def test_the_fleets_intervals_and_usage_equal_the_nodes(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from harness.cli import podstore
    from harness.nodegen import Node

    from podstore.storage import events

    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    now = [t0]
    monkeypatch.setattr(events, "utcnow", lambda: now[0])

    def at(seconds: float) -> str:
        return (t0 + timedelta(seconds=seconds)).isoformat(timespec="microseconds")[:-6] + "Z"

    node = Node(2)
    db = tmp_path / "n.db"
    with PodStore.open(db) as store:
        store.set_pod_names({"p1": PodName("team-a", "x"), "p2": PodName("team-b", "y")})
        store.set_dra_state(node.dra())
        store.insert("p1", "main", "nvidia.com/gpu", {0: ["G1"]}, b"")
        store.insert("p2", "main", "nvidia.com/gpu", {0: ["G2", "G3"]}, b"")
        now[0] = t0 + timedelta(seconds=100)
        store.record_ends([("p1", "main", "runtime", at(40))])
        store.insert("p2", "main", "nvidia.com/gpu", {0: ["G3"]}, b"")
        now[0] = t0 + timedelta(seconds=200)
        store.delete(["p1"])
        store.set_pod_names({"p2": PodName("team-b", "y")})
        ship(store, fleet_url, node="node-1")
        local = [
            tuple(r)
            for r in store.query(
                "SELECT mechanism, resource, device, physical_id, share, pod_uid, namespace, "
                'pod_name, container, start, "end", end_source FROM v_allocation_intervals'
            ).rows
        ]
    central = rows(
        fleet_url,
        "SELECT node, mechanism, resource, device, physical_id, share, pod_uid, namespace, "
        'pod_name, container, start, "end", end_source FROM v_fleet_allocation_intervals',
        {},
    )
    assert {r[0] for r in central} == {"node-1"}

    def stamp(v: object) -> object:
        return (
            v.isoformat(timespec="microseconds").replace("+00:00", "Z")
            if isinstance(v, datetime)
            else float(v)
            if type(v).__name__ == "Decimal"
            else v
        )

    assert sorted(tuple(stamp(v) for v in r[1:]) for r in central) == sorted(local)
    until = at(300)
    for by in ("namespace", "pod", "resource", "physical"):
        for window in (["--until", until], ["--since", at(50), "--until", at(150)]):
            mine = podstore("--db", str(db), "usage", "--by", by, *window, "-o", "json",
                            cwd=tmp_path)  # fmt: skip
            theirs = podstore("fleet", "usage", "--url", fleet_url, "--by", by, *window,
                              "-o", "json", cwd=tmp_path)  # fmt: skip
            assert mine.returncode == 0 and theirs.returncode == 0, mine.stderr + theirs.stderr
            fleet_rows = [
                {k: v for k, v in r.items() if k != "node"} for r in json.loads(theirs.stdout)
            ]
            assert fleet_rows == json.loads(mine.stdout), (by, window)
    by_node = podstore("fleet", "usage", "--url", fleet_url, "--by", "node", "--until", until,
                       "-o", "json", cwd=tmp_path)  # fmt: skip
    assert json.loads(by_node.stdout) == [
        # G1 40 s (runtime), G2 100 s (replaced away), G3 300 s (held), and the node's two DRA
        # claims' NICs 300 s each (held)
        {
            "node": "node-1",
            "device_seconds": 1040.0,
            "device_hours": round(1040 / 3600, 6),
            "intervals": 5,
        }
    ]
