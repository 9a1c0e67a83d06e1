"""The node's CPU, memory and DRA managers' events, its topology and pod names (node revision
0007) are in the same hash chain as its device events: they ship with them, exactly once,
the fleet re-checks their hashes like any other event, and they never move the fleet's device
state nor list a CPU number or a claim as a device; a DRA claim's events list its devices
(``driver/pool/device``) as the node's event device rows do (revision f0003)."""

from __future__ import annotations

from pathlib import Path

from harness.fleetlib import assert_same_state, fleet_event_seqs, rows
from harness.nodegen import Node

from podstore import PodStore
from podstore.fleet import read
from podstore.fleet.ship import ship
from podstore.storage.schema import NODE_EVENT_OPS


def _check(url: str, store: PodStore) -> None:
    seqs = [e.seq for e in store.history()]
    assert fleet_event_seqs(url, store.store_id) == seqs
    assert_same_state(url, store)
    listed = rows(
        url,
        "SELECT seq, op, devices FROM fleet_events WHERE store_id = CAST(:s AS uuid) "
        "AND op = ANY(:ops) AND cardinality(devices) > 0 ORDER BY seq",
        {"s": store.store_id, "ops": list(NODE_EVENT_OPS)},
    )
    assert {op for _seq, op, _devices in listed} <= {"dra-set", "dra-delete"}
    node_listed: dict[int, list[str]] = {}
    for seq, device in store.query(
        "SELECT d.seq, d.device_id FROM allocation_event_devices d "
        "JOIN allocation_events e ON e.seq = d.seq "
        "WHERE d.released = 0 AND e.op IN ('dra-set', 'dra-delete') ORDER BY 1, 2"
    ).rows:
        node_listed.setdefault(seq, []).append(device)
    assert {seq: sorted(devices) for seq, _op, devices in listed} == node_listed
    (checked,) = read.verify(url).dicts()
    assert (checked["chained"], checked["problem"]) == (seqs[-1], None)


def test_node_manager_events_ship_in_the_chain_and_leave_the_device_state_alone(
    tmp_path: Path, fleet_url: str
) -> None:
    first = Node(4, misaligned={1}, cpus_per_node=12).write_all(tmp_path / "first")
    second = Node(6, cpus_per_node=12).write_all(tmp_path / "second")
    with PodStore.open(tmp_path / "n.db") as store:
        store.import_node(first[0], sysfs=first[1], pod_logs=first[2])
        ops = {e.op for e in store.history()}
        assert {"cpu-set", "memory-set", "dra-set", "node-set"} <= ops
        report = ship(store, fleet_url, node="node-1")
        assert report.shipped == len(list(store.history()))
        _check(fleet_url, store)

        # A changed node: its new and removed items ship after the events already there.
        store.import_node(second[0], sysfs=second[1], pod_logs=second[2])
        again = ship(store, fleet_url, node="node-1")
        assert again.shipped > 0
        _check(fleet_url, store)
        assert ship(store, fleet_url, node="node-1").shipped == 0
