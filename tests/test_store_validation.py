"""Input checking: bad arguments raise InvalidInputError naming the argument; nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.refmodel import resp, store_dump

from podstore import Device, InvalidInputError, PodDevicesEntry, PodStore

RES = "vendor.com/dev"
GOOD = resp(envs={"A": "1"}).SerializeToString()
LONE = "\ud800"

# Deliberately wrong argument types: the store is Any to the type checker here.
Call = Callable[[Any], object]


def ins(*args: Any) -> Call:
    return lambda s: s.insert(*args)


def restore(*entries: Any) -> Call:
    return lambda s: s.from_checkpoint_data(list(entries))


def entry(**fields: Any) -> PodDevicesEntry:
    base: dict[str, Any] = {
        "pod_uid": "p9",
        "container_name": "c",
        "resource_name": RES,
        "device_ids": {0: ["x"]},
        "alloc_resp": GOOD,
    }
    base.update(fields)
    return PodDevicesEntry(**base)


BAD_CALLS: list[tuple[str, Call, str]] = [
    # insert: names
    ("pod_uid int", ins(1, "c", RES, None, None), "pod_uid"),
    ("pod_uid None", ins(None, "c", RES, None, None), "pod_uid"),
    ("pod_uid bytes", ins(b"p", "c", RES, None, None), "pod_uid"),
    ("pod_uid surrogate", ins("p" + LONE, "c", RES, None, None), "pod_uid"),
    ("container_name int", ins("p", 0, RES, None, None), "container_name"),
    ("resource_name surrogate", ins("p", "c", LONE, None, None), "resource_name"),
    # insert: devices
    ("devices str", ins("p", "c", RES, "d0", None), "devices"),
    ("devices list", ins("p", "c", RES, ["d0"], None), "devices"),
    ("numa str", ins("p", "c", RES, {"0": ["d"]}, None), "devices"),
    ("numa bool", ins("p", "c", RES, {True: ["d"]}, None), "devices"),
    ("numa float", ins("p", "c", RES, {0.0: ["d"]}, None), "devices"),
    ("numa above int64", ins("p", "c", RES, {2**63: ["d"]}, None), "devices"),
    ("numa below int64", ins("p", "c", RES, {-(2**63) - 1: ["d"]}, None), "devices"),
    ("ids str", ins("p", "c", RES, {0: "d0"}, None), "devices[0]"),
    ("ids bytes", ins("p", "c", RES, {0: b"d0"}, None), "devices[0]"),
    ("ids dict", ins("p", "c", RES, {0: {"d0": 1}}, None), "devices[0]"),
    ("id int", ins("p", "c", RES, {0: ["d0", 7]}, None), "devices[0][1]"),
    ("id None", ins("p", "c", RES, {0: [None]}, None), "devices[0][0]"),
    ("id bytes", ins("p", "c", RES, {1: [b"d"]}, None), "devices[1][0]"),
    ("id surrogate", ins("p", "c", RES, {0: ["ok", "x" + LONE]}, None), "devices[0][1]"),
    ("id in set int", ins("p", "c", RES, {0: {"a", 3}}, None), "devices[0]"),
    # insert: alloc_resp
    ("alloc_resp garbage", ins("p", "c", RES, None, b"\xff\xff\xff"), "alloc_resp"),
    ("alloc_resp truncated", ins("p", "c", RES, None, GOOD[:-1]), "alloc_resp"),
    ("alloc_resp str", ins("p", "c", RES, None, "CgYKAUE="), "alloc_resp"),
    ("alloc_resp int", ins("p", "c", RES, None, 0), "alloc_resp"),
    ("alloc_resp dict", ins("p", "c", RES, None, {"envs": {}}), "alloc_resp"),
    ("alloc_resp other message", ins("p", "c", RES, None, Device(ID="x")), "alloc_resp"),
    # delete
    ("delete str", lambda s: s.delete("p1"), "pod_uids"),
    ("delete int", lambda s: s.delete(5), "pod_uids"),
    ("delete member int", lambda s: s.delete(["p1", 5]), "pod_uids[1]"),
    ("delete member surrogate", lambda s: s.delete([LONE]), "pod_uids[0]"),
    # from_checkpoint_data: every entry is checked before anything is written
    ("entries str", lambda s: s.from_checkpoint_data("abc"), "entries"),
    ("entries None", lambda s: s.from_checkpoint_data(None), "entries"),
    ("entries member", restore(entry(), ("p", "c", RES, None, None)), "entries[1]"),
    ("entry pod int", restore(entry(), entry(pod_uid=3)), "entries[1].pod_uid"),
    ("entry numa str", restore(entry(), entry(device_ids={"0": []})), "entries[1].device_ids"),
    ("entry numa big", restore(entry(device_ids={2**64: []})), "entries[0].device_ids"),
    ("entry ids str", restore(entry(device_ids={0: "x"})), "entries[0].device_ids"),
    ("entry id int", restore(entry(device_ids={0: [1]})), "entries[0].device_ids"),
    ("entry alloc_resp str", restore(entry(), entry(alloc_resp="AA==")), "entries[1].alloc_resp"),
    ("entry alloc_resp message", restore(entry(alloc_resp=resp())), "entries[0].alloc_resp"),
    # set_registered_devices
    ("registered list", lambda s: s.set_registered_devices(["a"]), "mapping"),
    ("registered key int", lambda s: s.set_registered_devices({1: ["a"]}), "mapping"),
    ("registered ids str", lambda s: s.set_registered_devices({"r": "a"}), "mapping"),
    ("registered id int", lambda s: s.set_registered_devices({"r": ["a", 2]}), "mapping"),
    # reads
    ("container_devices pod", lambda s: s.container_devices(1, "c", RES), "pod_uid"),
    ("container_devices res", lambda s: s.container_devices("p", "c", None), "resource_name"),
    ("pod_devices res", lambda s: s.pod_devices("p1", 1), "resource_name"),
    ("has_pod", lambda s: s.has_pod(None), "pod_uid"),
    ("get_container_devices", lambda s: s.get_container_devices("p", 2), "container_name"),
    ("run options", lambda s: s.device_run_container_options(1, "c"), "pod_uid"),
    ("owner id", lambda s: s.get_pod_and_container_for_device(5), "device_id"),
    ("owner res", lambda s: s.get_pod_and_container_for_device("a", 5), "resource_name"),
]


@pytest.fixture
def seeded(store: PodStore) -> PodStore:
    store.insert("p1", "c", RES, {0: ["a"], -1: ["b"]}, GOOD)
    store.insert("p2", "c", "other", None, None)
    store.set_registered_devices({RES: ["a", "b"]})
    return store


@pytest.mark.parametrize("call,argument", [(c, a) for _, c, a in BAD_CALLS],
                         ids=[n for n, _, _ in BAD_CALLS])  # fmt: skip
def test_bad_input_is_refused_and_changes_nothing(
    seeded: PodStore, call: Call, argument: str
) -> None:
    before = store_dump(seeded)
    with pytest.raises(InvalidInputError) as info:
        call(seeded)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(argument), str(info.value)
    assert store_dump(seeded) == before


@pytest.mark.parametrize(
    "acc,argument",
    [
        ([("r", {"a"})], "allocated"),
        ({"r": ["a"]}, "allocated['r']"),
        ({"r": "a"}, "allocated['r']"),
        ({"r": {"a", 1}}, "allocated['r']"),
        ({1: {"a"}}, "allocated"),
        ({"r": {LONE}}, "allocated['r']"),
    ],
)
@pytest.mark.parametrize("method", ["add", "remove"])
def test_bad_accumulator_is_refused_and_left_alone(
    seeded: PodStore, acc: Any, argument: str, method: str
) -> None:
    fn = getattr(seeded, f"{method}_container_allocated_resources")
    snapshot = repr(acc)
    with pytest.raises(InvalidInputError) as info:
        fn("p1", "c", acc)
    assert str(info.value).startswith(argument), str(info.value)
    assert repr(acc) == snapshot


def test_an_undecodable_alloc_resp_in_a_restore_is_skipped_not_refused(seeded: PodStore) -> None:
    # kubelet skips such entries; that is not bad input (contrast with insert).
    seeded.from_checkpoint_data([entry(alloc_resp=b"\xff"), entry(pod_uid="p3")])
    assert seeded.pods() == {"p1", "p2", "p3"}


def test_numa_ids_at_the_int64_bounds_are_accepted(store: PodStore) -> None:
    store.insert("p", "c", RES, {2**63 - 1: ["a"], -(2**63): ["b"]}, None)
    assert store.container_devices("p", "c", RES) == {"a", "b"}


def test_tuples_and_sets_are_accepted_as_device_lists(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ("b", "a"), 1: frozenset({"z", "y"})}, b"")
    assert store.to_checkpoint_data()[0].device_ids == {0: ["b", "a"], 1: ["y", "z"]}


@pytest.mark.parametrize(
    "target,kwargs",
    [
        (":memory:", {}),
        ("sqlite://", {}),
        ("sqlite:///:memory:", {}),
        ("postgresql://u@h/db", {}),
        ("", {}),
        ("DB", {"durability": "fast"}),
        ("DB", {"busy_timeout": -1}),
        ("DB", {"busy_timeout": "5"}),
        ("DB", {"busy_timeout": True}),
    ],
)
def test_open_refuses_bad_arguments(tmp_path: Path, target: str, kwargs: dict[str, Any]) -> None:
    path = str(tmp_path / "x.db") if target == "DB" else target
    with pytest.raises(InvalidInputError):
        PodStore.open(path, **kwargs)
    assert not (tmp_path / "x.db").exists()
