"""get_container_devices and ResourceDeviceInstances (kubelet-semantics §3, api.md's rules)."""

from __future__ import annotations

import pytest
from harness.refmodel import topology_view

from podstore import (
    Device,
    NUMANode,
    PodStore,
    ResourceDeviceInstances,
    TopologyInfo,
)

RES = "vendor.com/dev"


def test_a_device_under_numa_0_and_1_gets_both_nodes(store: PodStore) -> None:
    # The upstream test: one device listed under two NUMA keys.
    store.insert("p", "c", RES, {0: ["dev1"], 1: ["dev1"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert isinstance(got, ResourceDeviceInstances)
    assert set(got) == {RES}
    dev = got[RES]["dev1"]
    assert [n.ID for n in dev.topology.nodes] == [0, 1]
    # Only the topology is populated, as upstream.
    assert dev.ID == ""
    assert dev.health == ""


def test_nodes_are_the_sorted_union(store: PodStore) -> None:
    store.insert("p", "c", RES, {10: ["a"], 2: ["a", "b"], 0: ["a"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {RES: {"a": (0, 2, 10), "b": (2,)}}


def test_a_device_only_under_minus_one_has_no_topology(store: PodStore) -> None:
    store.insert("p", "c", RES, {-1: ["x"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert not got[RES]["x"].HasField("topology")
    assert got[RES]["x"] == Device()


def test_minus_one_beside_a_real_node_keeps_only_the_real_nodes(store: PodStore) -> None:
    # Non-deterministic upstream; api.md: the sorted union of the ids, ignoring -1.
    store.insert("p", "c", RES, {-1: ["x"], 3: ["x"], 1: ["x"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {RES: {"x": (1, 3)}}


def test_a_device_listed_twice_under_one_node_gets_that_node_once(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ["x", "x"], -1: ["y", "y"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {RES: {"x": (0,), "y": None}}


@pytest.mark.parametrize("devices", [None, {}], ids=["nil-map", "empty-map"])
def test_a_resource_without_numa_keys_is_left_out(
    store: PodStore, devices: dict[int, list[str] | None] | None
) -> None:
    store.insert("p", "c", "empty", devices, b"")
    store.insert("p", "c", RES, {0: ["a"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {RES: {"a": (0,)}}


def test_a_container_whose_only_resource_has_no_keys_gives_an_empty_map(store: PodStore) -> None:
    store.insert("p", "c", RES, None, b"")
    assert store.get_container_devices("p", "c") == {}


def test_numa_keys_with_only_empty_lists_give_an_empty_inner_map(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: [], 1: None}, b"")
    assert store.get_container_devices("p", "c") == {RES: {}}


def test_unknown_pod_or_container_is_none(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ["a"]}, b"")
    assert store.get_container_devices("x", "c") is None
    assert store.get_container_devices("p", "x") is None


def test_only_the_named_container_and_every_response_kind_count(store: PodStore) -> None:
    store.insert("p", "c", "r1", {0: ["a"]}, None)  # no response: still listed
    store.insert("p", "c", "r2", {-1: ["b"], 5: ["c"]}, b"")
    store.insert("p", "other", "r1", {0: ["z"]}, b"")
    store.insert("q", "c", "r1", {0: ["y"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {"r1": {"a": (0,)}, "r2": {"b": None, "c": (5,)}}


def test_extreme_numa_ids(store: PodStore) -> None:
    lo, hi = -(2**63), 2**63 - 1
    store.insert("p", "c", RES, {hi: ["a"], lo: ["a"], -2: ["b"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    assert topology_view(got) == {RES: {"a": (lo, hi), "b": (-2,)}}


# ---- ResourceDeviceInstances ------------------------------------------------------------------


def _rdi() -> ResourceDeviceInstances:
    out = ResourceDeviceInstances()
    out["r1"] = {
        "a": Device(ID="a", health="Healthy", topology=TopologyInfo(nodes=[NUMANode(ID=0)])),
        "b": Device(ID="b", health="Unhealthy"),
    }
    out["r2"] = {"c": Device(ID="c")}
    return out


def test_new_resource_device_instances_is_an_empty_dict() -> None:
    rdi = ResourceDeviceInstances()
    assert rdi == {}
    assert isinstance(rdi, dict)


def test_clone_is_deep() -> None:
    orig = _rdi()
    clone = orig.clone()
    assert isinstance(clone, ResourceDeviceInstances)
    assert clone == orig
    clone["r1"]["a"].topology.nodes.append(NUMANode(ID=7))
    clone["r1"]["a"].health = "Unhealthy"
    clone["r1"]["new"] = Device(ID="new")
    clone["r3"] = {}
    assert orig == _rdi()
    assert clone["r1"] is not orig["r1"]
    assert clone["r1"]["b"] is not orig["r1"]["b"]


def test_filter_keeps_only_listed_devices_of_listed_resources() -> None:
    orig = _rdi()
    got = orig.filter({"r1": {"a", "ghost"}, "r3": {"c"}})
    assert isinstance(got, ResourceDeviceInstances)
    # r2 is not in cond: dropped; r3 is not in the receiver: skipped; ghost is ignored.
    assert got == {"r1": {"a": orig["r1"]["a"]}}
    assert orig == _rdi()  # the receiver is untouched


def test_filter_with_empty_cond_is_empty() -> None:
    assert _rdi().filter({}) == {}
    assert _rdi().filter({}) is not None


def test_filter_keeps_a_resource_even_when_nothing_of_it_remains() -> None:
    assert _rdi().filter({"r2": set(), "r1": {"zzz"}}) == {"r2": {}, "r1": {}}


def test_filter_result_is_a_new_mapping() -> None:
    orig = _rdi()
    got = orig.filter({"r2": {"c"}})
    got["r2"]["extra"] = Device()
    assert "extra" not in orig["r2"]


def test_allocatable_devices_pattern(store: PodStore) -> None:
    """kubelet computes allocatable devices as allDevices.Filter(healthyDevices)."""
    store.insert("p", "c", "r1", {0: ["a", "b"], 1: ["b"]}, b"")
    store.insert("p", "c", "r2", {-1: ["c"]}, b"")
    got = store.get_container_devices("p", "c")
    assert got is not None
    healthy = got.filter({"r1": {"b"}, "r2": {"c"}})
    assert topology_view(healthy) == {"r1": {"b": (0, 1)}, "r2": {"c": None}}
