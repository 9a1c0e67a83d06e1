"""api.md's parity table, row by row, with the nil-vs-empty cases of kubelet-semantics §2."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from harness.refmodel import resp, store_dump

from podstore import (
    ContainerAllocateResponse,
    DeviceRunContainerOptions,
    InvalidInputError,
    PodDevicesEntry,
    PodStore,
)

RES = "vendor.com/dev"
OTHER = "other.io/x"


def entry_keys(store: PodStore) -> list[tuple[str, str, str]]:
    return [(e.pod_uid, e.container_name, e.resource_name) for e in store.to_checkpoint_data()]


# ---- pods / size / len / has_pod / in ---------------------------------------------------------


def test_empty_store_answers_with_empty_values(store: PodStore) -> None:
    assert store.pods() == set()
    assert isinstance(store.pods(), set)
    assert store.size() == 0
    assert len(store) == 0
    assert not store.has_pod("p")
    assert "p" not in store
    assert store.devices() == {}
    assert store.to_checkpoint_data() == []
    assert store.registered_devices() == {}


def test_pods_size_and_membership(store: PodStore) -> None:
    store.insert("p1", "c1", RES, {0: ["d0"]}, b"")
    store.insert("p1", "c2", RES, {0: ["d1"]}, b"")
    store.insert("p2", "c1", OTHER, None, None)  # a pod with only a partial entry still counts
    assert store.pods() == {"p1", "p2"}
    assert store.size() == len(store) == 2
    assert store.has_pod("p1") and store.has_pod("p2")
    assert "p2" in store
    assert "p3" not in store
    assert not store.has_pod("p3")


def test_in_with_a_non_str_is_false_not_an_error(store: PodStore) -> None:
    store.insert("1", "c", RES, None, None)
    assert 1 not in store
    assert None not in store
    assert b"1" not in store


# ---- insert ----------------------------------------------------------------------------------


def test_insert_replaces_the_entry_and_keeps_its_position(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["a"]}, resp(envs={"A": "1"}))
    store.insert("p2", "c", RES, {0: ["b"]}, b"")
    store.insert("p3", "c", RES, {0: ["c"]}, b"")
    store.insert("p1", "c", RES, {1: ["z"]}, resp(envs={"A": "2"}))
    assert entry_keys(store) == [("p1", "c", RES), ("p2", "c", RES), ("p3", "c", RES)]
    first = store.to_checkpoint_data()[0]
    assert first.device_ids == {1: ["z"]}
    assert first.alloc_resp == resp(envs={"A": "2"}).SerializeToString(deterministic=True)
    assert store.container_devices("p1", "c", RES) == {"z"}


def test_replacing_insert_can_drop_the_response(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ["a"]}, b"")
    store.insert("p", "c", RES, {0: ["a"]}, None)
    assert store.to_checkpoint_data() == []
    assert store.container_devices("p", "c", RES) == {"a"}
    assert store.devices() == {RES: set()}


def test_entry_order_is_global_first_insertion_not_grouped_by_pod(store: PodStore) -> None:
    store.insert("p1", "c", "r1", {0: ["a"]}, b"")
    store.insert("p2", "c", "r1", {0: ["b"]}, b"")
    store.insert("p1", "c", "r2", {0: ["c"]}, b"")
    store.insert("p1", "c0", "r1", {0: ["d"]}, b"")
    assert entry_keys(store) == [("p1", "c", "r1"), ("p2", "c", "r1"), ("p1", "c", "r2"),
                                 ("p1", "c0", "r1")]  # fmt: skip


def test_delete_and_reinsert_moves_the_entry_to_the_end(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["a"]}, b"")
    store.insert("p2", "c", RES, {0: ["b"]}, b"")
    store.insert("p3", "c", RES, {0: ["c"]}, b"")
    store.delete(["p1"])
    store.insert("p1", "c", RES, {0: ["a"]}, b"")
    assert entry_keys(store) == [("p2", "c", RES), ("p3", "c", RES), ("p1", "c", RES)]
    # Deleting the last entry and inserting another still appends.
    store.delete(["p1"])
    store.insert("p4", "c", RES, {0: ["d"]}, b"")
    store.insert("p1", "c", RES, {0: ["a"]}, b"")
    assert entry_keys(store) == [
        ("p2", "c", RES),
        ("p3", "c", RES),
        ("p4", "c", RES),
        ("p1", "c", RES),
    ]


def test_insert_accepts_message_bytes_bytearray_memoryview_and_none(store: PodStore) -> None:
    msg = resp(envs={"B": "2", "A": "1"}, cdi=["v.com/c=x"])
    canonical = msg.SerializeToString(deterministic=True)
    store.insert("p", "c", "r-msg", None, msg)
    store.insert("p", "c", "r-bytes", None, canonical)
    store.insert("p", "c", "r-bytearray", None, bytearray(canonical))
    store.insert("p", "c", "r-memoryview", None, memoryview(canonical))
    store.insert("p", "c", "r-none", None, None)
    got = {e.resource_name: e.alloc_resp for e in store.to_checkpoint_data()}
    assert got == dict.fromkeys(["r-msg", "r-bytes", "r-bytearray", "r-memoryview"], canonical)


def test_raw_bytes_are_stored_exactly_even_in_non_canonical_map_order(store: PodStore) -> None:
    # envs B=2 then A=1: kubelet's map order is random, so any order must round-trip unchanged.
    raw = bytes.fromhex("0a060a01421201320a060a0141120131")
    assert ContainerAllocateResponse.FromString(raw).envs == {"A": "1", "B": "2"}
    store.insert("p", "c", RES, None, raw)
    assert store.to_checkpoint_data()[0].alloc_resp == raw


def test_insert_keeps_list_order_duplicates_and_null_vs_empty_lists(store: PodStore) -> None:
    devices: dict[int, list[str] | None] = {1: ["b", "a", "b"], -1: ["x"], 0: [], 2: None}
    store.insert("p", "c", RES, devices, b"")
    assert store.to_checkpoint_data()[0].device_ids == devices
    store.insert("p", "c", "null", None, b"")
    store.insert("p", "c", "empty", {}, b"")
    by_res = {e.resource_name: e.device_ids for e in store.to_checkpoint_data()}
    assert by_res["null"] is None
    assert by_res["empty"] == {}


def test_insert_sorts_a_set_of_device_ids(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: {"c", "a", "b"}}, b"")
    assert store.to_checkpoint_data()[0].device_ids == {0: ["a", "b", "c"]}


def test_insert_copies_the_callers_mapping(store: PodStore) -> None:
    devices: dict[int, list[str] | None] = {0: ["a"]}
    store.insert("p", "c", RES, devices, b"")
    lst = devices[0]
    assert lst is not None
    lst.append("b")
    devices[1] = ["z"]
    assert store.container_devices("p", "c", RES) == {"a"}


def test_extreme_numa_ids_and_odd_strings_round_trip(store: PodStore) -> None:
    odd = ["", "a b", "ü<&>", "x\x00y", "🙂", "'; DROP TABLE pods; --"]
    devices: dict[int, list[str] | None] = {-(2**63): odd[:3], 2**63 - 1: odd[3:]}
    store.insert(odd[5], odd[2], odd[4], devices, b"")
    [e] = store.to_checkpoint_data()
    assert (e.pod_uid, e.container_name, e.resource_name) == (odd[5], odd[2], odd[4])
    assert e.device_ids == devices
    assert store.container_devices(odd[5], odd[2], odd[4]) == set(odd)
    assert store.pods() == {odd[5]}


# ---- delete ----------------------------------------------------------------------------------


def test_delete_drops_whole_pods_and_ignores_unknown_uids(store: PodStore) -> None:
    store.insert("p1", "c1", RES, {0: ["a"]}, b"")
    store.insert("p1", "c2", OTHER, {0: ["b"]}, b"")
    store.insert("p2", "c1", RES, {0: ["c"]}, b"")
    store.delete(["p1", "nope", "p1"])
    assert store.pods() == {"p2"}
    assert store.container_devices("p1", "c1", RES) is None
    assert store.get_container_devices("p1", "c2") is None
    assert store.devices() == {RES: {"c"}}
    assert store.stats().device_rows == 1  # the cascade reached the device rows
    store.delete([])
    store.delete({"p2"})
    store.delete(x for x in ["unknown"])
    assert store.pods() == set()


def test_delete_rejects_a_bare_str(store: PodStore) -> None:
    store.insert("p", "c", RES, None, None)
    before = store_dump(store)
    with pytest.raises(InvalidInputError, match="pod_uids"):
        store.delete("p")
    with pytest.raises(InvalidInputError, match="pod_uids"):
        store.delete(b"p")  # type: ignore[arg-type]
    assert store_dump(store) == before


# ---- pod_devices / container_devices -------------------------------------------------------


def test_pod_devices_is_the_union_across_containers(store: PodStore) -> None:
    store.insert("p", "c1", RES, {0: ["a", "b"]}, b"")
    store.insert("p", "c2", RES, {1: ["b", "c"], -1: ["d"]}, None)
    store.insert("p", "c3", OTHER, {0: ["z"]}, b"")
    store.insert("q", "c1", RES, {0: ["y"]}, b"")
    assert store.pod_devices("p", RES) == {"a", "b", "c", "d"}
    assert store.pod_devices("p", OTHER) == {"z"}
    assert store.pod_devices("p", "unknown") == set()
    assert store.pod_devices("unknown", RES) == set()
    assert isinstance(store.pod_devices("unknown", RES), set)


@pytest.mark.parametrize(
    "devices",
    [None, {}, {0: []}, {0: None}, {-1: [], 3: None}],
    ids=["nil-map", "empty-map", "empty-list", "nil-list", "only-empty-lists"],
)
def test_container_devices_is_empty_not_none_for_an_entry_without_devices(
    store: PodStore, devices: dict[int, list[str] | None] | None
) -> None:
    store.insert("p", "c", RES, devices, None)
    assert store.container_devices("p", "c", RES) == set()
    assert store.container_devices("p", "c", RES) is not None


def test_container_devices_is_none_for_unknown_pod_container_or_resource(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ["a"], 1: ["a", "b"]}, b"")
    assert store.container_devices("p", "c", RES) == {"a", "b"}
    assert store.container_devices("x", "c", RES) is None
    assert store.container_devices("p", "x", RES) is None
    assert store.container_devices("p", "c", "x") is None


# ---- add/remove_container_allocated_resources ------------------------------------------------


@pytest.fixture
def two_resources(store: PodStore) -> PodStore:
    store.insert("p", "c", "r1", {0: ["a", "b"]}, None)  # responses are not looked at
    store.insert("p", "c", "r2", {0: []}, b"")
    store.insert("p", "other", "r3", {0: ["z"]}, b"")
    return store


def test_add_container_allocated_resources_unions_into_the_accumulator(
    two_resources: PodStore,
) -> None:
    keep = {"q"}
    acc: dict[str, set[str]] = {"r1": {"x", "a"}, "r3": keep}
    two_resources.add_container_allocated_resources("p", "c", acc)
    assert acc == {"r1": {"x", "a", "b"}, "r2": set(), "r3": {"q"}}
    assert acc["r3"] is keep  # a resource the container does not have is left alone


def test_remove_container_allocated_resources_subtracts_and_adds_missing_keys(
    two_resources: PodStore,
) -> None:
    keep = {"z", "q"}
    acc: dict[str, set[str]] = {"r1": {"a", "x"}, "r3": keep}
    two_resources.remove_container_allocated_resources("p", "c", acc)
    # r2 was missing: it gains an empty set, as upstream.
    assert acc == {"r1": {"x"}, "r2": set(), "r3": {"z", "q"}}
    assert acc["r3"] is keep


@pytest.mark.parametrize("pod,container", [("unknown", "c"), ("p", "unknown")])
def test_add_and_remove_ignore_an_unknown_pod_or_container(
    two_resources: PodStore, pod: str, container: str
) -> None:
    acc: dict[str, set[str]] = {"r1": {"a"}}
    two_resources.add_container_allocated_resources(pod, container, acc)
    assert acc == {"r1": {"a"}}
    two_resources.remove_container_allocated_resources(pod, container, acc)
    assert acc == {"r1": {"a"}}


def test_add_and_remove_handle_odd_device_ids_exactly(store: PodStore) -> None:
    # Device IDs are arbitrary strings, NUL included (Go strings and JSON \u0000 allow it).
    odd = ["x\x00y", "", "ü", 'q"\\', "🙂"]
    store.insert("p", "c", "r\x00s", {0: odd}, b"")
    acc: dict[str, set[str]] = {"r\x00s": {"x", "x\x00y", "x\x00z"}}
    store.add_container_allocated_resources("p", "c", acc)
    assert acc == {"r\x00s": {"x", "x\x00z", *odd}}
    store.remove_container_allocated_resources("p", "c", acc)
    assert acc == {"r\x00s": {"x", "x\x00z"}}


# ---- devices() -----------------------------------------------------------------------------


def test_devices_unions_per_resource_and_counts_only_entries_with_a_response(
    store: PodStore,
) -> None:
    store.insert("p1", "c", RES, {0: ["a"], 1: ["a", "b"]}, b"")
    store.insert("p2", "c", RES, {-1: ["c"]}, resp(envs={"X": "1"}))
    store.insert("p3", "c", RES, {0: ["hidden"]}, None)
    store.insert("p3", "c", "nil-only", {0: ["n1"]}, None)
    store.insert("p4", "c", "nil-only", {0: ["n2"]}, None)
    store.insert("p4", "c", "no-devices", None, b"")
    assert store.devices() == {RES: {"a", "b", "c"}, "nil-only": set(), "no-devices": set()}


# ---- to_checkpoint_data / from_checkpoint_data -----------------------------------------------


def test_to_checkpoint_data_skips_entries_without_a_response(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["a"]}, None)
    assert store.to_checkpoint_data() == []
    assert isinstance(store.to_checkpoint_data(), list)
    store.insert("p2", "c", RES, {0: ["b"]}, b"")
    assert store.to_checkpoint_data() == [PodDevicesEntry("p2", "c", RES, {0: ["b"]}, b"")]


def test_from_checkpoint_data_merges_and_a_later_duplicate_overwrites(store: PodStore) -> None:
    store.insert("kept", "c", RES, {0: ["k"]}, b"")
    store.insert("p", "c", RES, {0: ["old"]}, b"")
    r1 = resp(envs={"V": "1"}).SerializeToString()
    r2 = resp(envs={"V": "2"}).SerializeToString()
    store.from_checkpoint_data(
        [
            PodDevicesEntry("n", "c", RES, {0: ["first"]}, r1),
            PodDevicesEntry("p", "c", RES, {1: ["replaced"]}, r1),
            PodDevicesEntry("m", "c", RES, {0: ["x"]}, r1),
            PodDevicesEntry("n", "c", RES, {0: ["second"]}, r2),
        ]
    )
    assert store.to_checkpoint_data() == [
        PodDevicesEntry("kept", "c", RES, {0: ["k"]}, b""),
        PodDevicesEntry("p", "c", RES, {1: ["replaced"]}, r1),
        PodDevicesEntry("n", "c", RES, {0: ["second"]}, r2),
        PodDevicesEntry("m", "c", RES, {0: ["x"]}, r1),
    ]


def test_from_checkpoint_data_skips_an_undecodable_alloc_resp(
    store: PodStore, caplog: pytest.LogCaptureFixture
) -> None:
    good = resp(envs={"A": "1"}).SerializeToString()
    with caplog.at_level(logging.ERROR, logger="podstore"):
        store.from_checkpoint_data(
            [
                PodDevicesEntry("p", "c", "r1", {0: ["a"]}, b"\xff\xff"),
                PodDevicesEntry("p", "c", "r2", {0: ["b"]}, good),
            ]
        )
    assert store.to_checkpoint_data() == [PodDevicesEntry("p", "c", "r2", {0: ["b"]}, good)]
    assert store.container_devices("p", "c", "r1") is None
    assert any("AllocResp" in r.getMessage() and "r1" in r.getMessage() for r in caplog.records)


def test_from_checkpoint_data_restores_a_null_alloc_resp_as_an_empty_response(
    store: PodStore,
) -> None:
    store.from_checkpoint_data([PodDevicesEntry("p", "c", RES, {0: ["a"]}, None)])
    # kubelet: after a restore allocResp is never nil, so the devices count in devices() ...
    assert store.devices() == {RES: {"a"}}
    # ... and run options exist, empty.
    assert store.device_run_container_options("p", "c") == DeviceRunContainerOptions()
    # ... and toCheckpointData marshals that empty message: empty bytes, not nil. (Only an
    # exported file writes null back; tests/test_restored_null.py checks every output.)
    assert store.to_checkpoint_data() == [PodDevicesEntry("p", "c", RES, {0: ["a"]}, b"")]


def test_from_checkpoint_data_round_trips_to_checkpoint_data(tmp_path: Path) -> None:
    entries = [
        PodDevicesEntry("p1", "c", "r", {-1: ["x", "y"], 0: [], 1: None, 10: ["d"]}, b""),
        PodDevicesEntry("p2", "c", "r", None, None),
        PodDevicesEntry("p1", "d", "s", {}, resp(envs={"A": "1"}).SerializeToString()),
    ]
    # kubelet restores a null AllocResp as an empty message, which marshals to empty bytes.
    restored = [dataclasses.replace(e, alloc_resp=e.alloc_resp or b"") for e in entries]
    with PodStore.open(tmp_path / "a.db") as a:
        a.from_checkpoint_data(entries)
        out = a.to_checkpoint_data()
    assert out == restored
    with PodStore.open(tmp_path / "b.db") as b:
        b.from_checkpoint_data(out)
        assert b.to_checkpoint_data() == restored


def test_bulk_and_single_restore_agree(tmp_path: Path) -> None:
    """More than 64 entries go through the bulk writer; the result must not differ."""
    r = resp(envs={"A": "1"}).SerializeToString()
    entries = [
        PodDevicesEntry(f"p{i % 7}", f"c{i % 3}", f"r{i % 4}", {i % 2: [f"d{i}"], -1: []}, r)
        for i in range(90)
    ]
    entries.append(PodDevicesEntry("bad", "c", "r", {0: ["x"]}, b"\xff"))
    with PodStore.open(tmp_path / "bulk.db") as bulk, PodStore.open(tmp_path / "one.db") as one:
        for s in (bulk, one):
            s.insert("p0", "c0", "r0", {0: ["pre"]}, b"")  # replaced, keeps its position
            s.insert("zz", "c", "r", None, None)
        bulk.from_checkpoint_data(entries)
        for e in entries:
            one.from_checkpoint_data([e])
        assert bulk.to_checkpoint_data() == one.to_checkpoint_data()
        assert bulk.devices() == one.devices()
        assert entry_keys(bulk)[0] == ("p0", "c0", "r0")
        assert bulk.pods() == one.pods()
        bulk.insert("new", "c", "r", {0: ["n"]}, b"")
        assert entry_keys(bulk)[-1] == ("new", "c", "r")


def test_registered_devices_are_replaced_as_a_whole(store: PodStore) -> None:
    store.set_registered_devices({"b.io/x": ["d2", "d1"], "a.io/y": [], "c.io/z": None})
    assert store.registered_devices() == {"b.io/x": ["d2", "d1"], "a.io/y": [], "c.io/z": []}
    store.set_registered_devices({"n.io/r": {"z", "y"}})
    assert store.registered_devices() == {"n.io/r": ["y", "z"]}
    store.set_registered_devices(None)
    assert store.registered_devices() == {}
    store.set_registered_devices({})
    assert store.registered_devices() == {}


def test_registered_devices_are_independent_of_entries(store: PodStore) -> None:
    store.set_registered_devices({RES: ["a"]})
    store.insert("p", "c", RES, {0: ["a"]}, b"")
    store.delete(["p"])
    assert store.registered_devices() == {RES: ["a"]}


# ---- get_pod_and_container_for_device -------------------------------------------------------


def test_get_pod_and_container_for_device(store: PodStore) -> None:
    store.insert("p1", "c1", "r1", {0: ["a"]}, None)  # the response does not matter
    store.insert("p2", "c2", "r2", {1: ["a", "b"], -1: ["c"]}, b"")
    store.insert("p3", "c3", "r2", {0: ["a"]}, b"")
    assert store.get_pod_and_container_for_device("a") == ("p1", "c1")  # earliest inserted
    assert store.get_pod_and_container_for_device("c") == ("p2", "c2")
    assert store.get_pod_and_container_for_device("a", "r2") == ("p2", "c2")
    assert store.get_pod_and_container_for_device("b", "r1") is None
    assert store.get_pod_and_container_for_device("nope") is None
    # A replacing insert keeps the position; delete + re-insert moves it behind.
    store.insert("p1", "c1", "r1", {0: ["a"]}, b"")
    assert store.get_pod_and_container_for_device("a") == ("p1", "c1")
    store.delete(["p1"])
    store.insert("p1", "c1", "r1", {0: ["a"]}, b"")
    assert store.get_pod_and_container_for_device("a") == ("p2", "c2")
    store.delete(["p2", "p3"])
    store.insert("p2", "c2", "r2", {0: ["a"]}, b"")
    assert store.get_pod_and_container_for_device("a") == ("p1", "c1")
