"""device_run_container_options: kubelet-semantics §4 with api.md's deterministic order."""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.refmodel import RefModel, resp
from hypothesis import given
from hypothesis import strategies as st

from podstore import (
    Annotation,
    CDIDevice,
    ContainerAllocateResponse,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    Mount,
    PodDevicesEntry,
    PodStore,
    StoreCorruptError,
)


def test_unknown_pod_or_container_is_none(store: PodStore) -> None:
    store.insert("p", "c", "r", None, resp(envs={"A": "1"}))
    assert store.device_run_container_options("x", "c") is None
    assert store.device_run_container_options("p", "x") is None


def test_a_container_whose_responses_are_all_nil_gives_empty_options(store: PodStore) -> None:
    # Upstream would dereference nil; a port skips such entries (kubelet-semantics §4).
    store.insert("p", "c", "r", {0: ["a"]}, None)
    assert store.device_run_container_options("p", "c") == DeviceRunContainerOptions()


def test_a_single_response_maps_every_section(store: PodStore) -> None:
    store.insert(
        "p",
        "c",
        "r",
        {0: ["a"]},
        resp(
            envs={"B": "2", "A": "1"},
            mounts=[("/m", "/h", True), ("/n", "/k", False)],
            devices=[("/dev/x", "/dev/hx", "rw"), ("/dev/y", "/dev/hy", "m")],
            annotations={"z": "1", "k": "v"},
            cdi=["vendor.com/class=dev0"],
        ),
    )
    opts = store.device_run_container_options("p", "c")
    assert opts == DeviceRunContainerOptions(
        envs=[EnvVar("A", "1"), EnvVar("B", "2")],  # sorted by key
        mounts=[
            Mount(name="/m", container_path="/m", host_path="/h", read_only=True),
            Mount(name="/n", container_path="/n", host_path="/k", read_only=False),
        ],
        devices=[DeviceInfo("/dev/hx", "/dev/x", "rw"), DeviceInfo("/dev/hy", "/dev/y", "m")],
        annotations=[Annotation("k", "v"), Annotation("z", "1")],
        cdi_devices=[CDIDevice("vendor.com/class=dev0")],
    )
    assert opts is not None
    assert all(m.selinux_relabel is False for m in opts.mounts)


def test_first_value_wins_across_resources_in_ascending_byte_order(
    store: PodStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Inserted out of order; "B.io" < "a.io" < "b.io" < "ü.io" in byte order.
    store.insert("p", "c", "b.io/r", None, resp(envs={"E": "b", "ONLY_B": "1"}))
    store.insert("p", "c", "ü.io/r", None, resp(envs={"E": "u"}))
    store.insert("p", "c", "a.io/r", None, resp(envs={"E": "a"}))
    store.insert("p", "c", "B.io/r", None, resp(envs={"E": "B"}))
    with caplog.at_level(logging.WARNING, logger="podstore"):
        opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert opts.envs == [EnvVar("E", "B"), EnvVar("ONLY_B", "1")]
    conflicts = [r for r in caplog.records if "conflict" in r.getMessage()]
    assert len(conflicts) == 3
    assert all(r.levelno == logging.ERROR for r in conflicts)
    assert "'E'" in conflicts[0].getMessage()


def test_equal_values_from_several_resources_are_not_a_conflict(
    store: PodStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.insert("p", "c", "r1", None, resp(envs={"E": "same"}, annotations={"k": "v"}))
    store.insert("p", "c", "r2", None, resp(envs={"E": "same"}, annotations={"k": "v"}))
    with caplog.at_level(logging.DEBUG, logger="podstore"):
        opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert opts.envs == [EnvVar("E", "same")]
    assert opts.annotations == [Annotation("k", "v")]
    assert not [r for r in caplog.records if "conflict" in r.getMessage()]


def test_devices_and_mounts_deduplicate_by_container_path(
    store: PodStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.insert(
        "p",
        "c",
        "r1",
        None,
        resp(
            devices=[("/dev/a", "/h/a", "rw"), ("/dev/a", "/h/a", "r")],  # within one response
            mounts=[("/m", "/h1", False)],
        ),
    )
    store.insert(
        "p",
        "c",
        "r2",
        None,
        resp(
            devices=[("/dev/a", "/h/other", "rw"), ("/dev/b", "/h/b", "")],
            mounts=[("/m", "/h2", True), ("/m2", "/h1", True)],
        ),
    )
    with caplog.at_level(logging.WARNING, logger="podstore"):
        opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert opts.devices == [DeviceInfo("/h/a", "/dev/a", "rw"), DeviceInfo("/h/b", "/dev/b", "")]
    assert opts.mounts == [
        Mount("/m", "/m", "/h1", False, False),
        Mount("/m2", "/m2", "/h1", True, False),
    ]
    messages = [r.getMessage() for r in caplog.records if "conflict" in r.getMessage()]
    assert len(messages) == 2  # /dev/a with another host path, /m with another host path
    assert any("/dev/a" in m for m in messages)
    assert any("'/m'" in m for m in messages)


def test_annotations_first_wins(store: PodStore, caplog: pytest.LogCaptureFixture) -> None:
    store.insert("p", "c", "r2", None, resp(annotations={"k": "late", "x": "1"}))
    store.insert("p", "c", "r1", None, resp(annotations={"k": "early"}))
    with caplog.at_level(logging.WARNING, logger="podstore"):
        opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert opts.annotations == [Annotation("k", "early"), Annotation("x", "1")]
    assert any("conflict" in r.getMessage() for r in caplog.records)


def test_cdi_devices_across_resources_and_duplicates(store: PodStore) -> None:
    # The upstream test: CDI devices of several resources, with duplicates, keep first-seen order.
    store.insert("p", "c", "r1", None, resp(cdi=["v.com/c=a", "v.com/c=b", "v.com/c=a"]))
    store.insert("p", "c", "r2", None, resp(cdi=["v.com/c=b", "v.com/c=c"]))
    store.insert("p", "c", "r0", None, resp(cdi=["v.com/c=z"]))
    opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert opts.cdi_devices == [CDIDevice(n) for n in ["v.com/c=z", "v.com/c=a", "v.com/c=b",
                                                       "v.com/c=c"]]  # fmt: skip
    # Without CDI annotations (1.32+), no cdi.k8s.io annotation appears.
    assert opts.annotations == []


def test_cdi_devices_false_leaves_them_out(store: PodStore) -> None:
    store.insert("p", "c", "r", None, resp(envs={"A": "1"}, cdi=["v.com/c=a"]))
    opts = store.device_run_container_options("p", "c", cdi_devices=False)
    assert opts == DeviceRunContainerOptions(envs=[EnvVar("A", "1")])


def test_a_restored_null_response_contributes_nothing_but_exists(store: PodStore) -> None:
    store.from_checkpoint_data([PodDevicesEntry("p", "c", "r0", {0: ["a"]}, None)])
    store.insert("p", "c", "r1", None, resp(envs={"A": "1"}))
    assert store.device_run_container_options("p", "c") == DeviceRunContainerOptions(
        envs=[EnvVar("A", "1")]
    )


def test_other_containers_and_pods_do_not_leak_in(store: PodStore) -> None:
    store.insert("p", "c", "r", None, resp(envs={"MINE": "1"}))
    store.insert("p", "d", "r", None, resp(envs={"SIBLING": "1"}))
    store.insert("q", "c", "r", None, resp(envs={"OTHER_POD": "1"}))
    assert store.device_run_container_options("p", "c") == DeviceRunContainerOptions(
        envs=[EnvVar("MINE", "1")]
    )


def test_the_answer_is_a_fresh_object_each_time(store: PodStore) -> None:
    store.insert("p", "c", "r", None, resp(envs={"A": "1"}))
    first = store.device_run_container_options("p", "c")
    assert first is not None
    first.envs.append(EnvVar("B", "2"))
    assert store.device_run_container_options("p", "c") == DeviceRunContainerOptions(
        envs=[EnvVar("A", "1")]
    )


def test_keys_sort_by_code_point_within_one_response(store: PodStore) -> None:
    keys = ["é", "a", "_", "B", "", "Z1", "a0"]
    store.insert(
        "p", "c", "r", None, resp(envs={k: "v" for k in keys}, annotations={k: "w" for k in keys})
    )
    opts = store.device_run_container_options("p", "c")
    assert opts is not None
    assert [e.name for e in opts.envs] == ["", "B", "Z1", "_", "a", "a0", "é"]
    assert [a.name for a in opts.annotations] == ["", "B", "Z1", "_", "a", "a0", "é"]


# ---- against the reference model ------------------------------------------------------------

KEYS = st.sampled_from(["A", "a", "B", "é", "_", "", "Z1", "a\x00b", "a\x00"])
VALUES = st.sampled_from(["1", "2", ""])
PATHS = st.sampled_from(["/dev/a", "/dev/b", "/m"])
HOSTS = st.sampled_from(["/h1", "/h2"])
CDI_NAMES = st.sampled_from(["v.com/c=a", "v.com/c=b", "a/b=c", "bad", "v/c=ü"])
RESPONSES = st.builds(
    resp,
    envs=st.dictionaries(KEYS, VALUES, max_size=3),
    mounts=st.lists(st.tuples(PATHS, HOSTS, st.booleans()), max_size=3),
    devices=st.lists(st.tuples(PATHS, HOSTS, st.sampled_from(["r", "rw", ""])), max_size=3),
    annotations=st.dictionaries(KEYS, VALUES, max_size=3),
    cdi=st.lists(CDI_NAMES, max_size=3),
)
RESOURCES = st.sampled_from(["r", "R", "s.io/x", "ü.io/y", "r0"])


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodStore]:
    with PodStore.open(tmp_path_factory.mktemp("run-options") / "store.db") as s:
        yield s


_pods = itertools.count()


@given(
    responses=st.dictionaries(RESOURCES, st.none() | RESPONSES | st.just(b""), max_size=4),
    container=st.sampled_from(["c", "a-very-long-container-name-beyond-the-limit"]),
)
def test_run_options_match_the_reference_model(
    shared_store: PodStore,
    responses: dict[str, ContainerAllocateResponse | bytes | None],
    container: str,
) -> None:
    pod = f"pod-{next(_pods)}"
    model = RefModel()
    for resource, response in responses.items():
        shared_store.insert(pod, container, resource, {0: ["d"]}, response)
        model.insert(pod, container, resource, {0: ["d"]}, response)
    for flags in ({}, {"cdi_devices": False}, {"cdi_annotations": True}):
        got = shared_store.device_run_container_options(pod, container, **flags)
        assert got == model.device_run_container_options(pod, container, **flags), flags


def test_a_stored_response_that_does_not_decode_is_store_corruption(db_path: Path) -> None:
    # Only a store changed behind podstore's back can hold such bytes: every write parses
    # the response first. The error names the resource and the store stays readable.
    with PodStore.open(db_path) as s:
        s.insert("p", "c", "vendor.com/gpu", {0: ["a"]}, resp(envs={"A": "1"}))
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE allocations SET alloc_resp = x'ff'")
    raw.close()
    with PodStore.open(db_path) as s:
        with pytest.raises(StoreCorruptError, match=r"vendor\.com/gpu does not decode"):
            s.device_run_container_options("p", "c")
        assert s.container_devices("p", "c", "vendor.com/gpu") == {"a"}
