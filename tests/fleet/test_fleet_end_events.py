"""End evidence (node revision 0010, fleet f0007) ships in the chain like any event: exactly
once, the fleet re-checks its hash, lists no device for it, and the device state it holds is
the node's."""

from __future__ import annotations

from pathlib import Path

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
