"""The views of docs/sql.md: columns, and the edge cases their definitions promise."""

from __future__ import annotations

import pytest

from podstore import ContainerAllocateResponse, PodStore

COLUMNS = {
    "v_allocations": ("pod_uid", "container", "resource", "numa_node", "device_id"),
    "v_device_owners": ("resource", "device_id", "pod_uid", "container"),
    "v_double_allocations": ("resource", "device_id", "pod_uid", "container", "pod_count"),
    "v_run_options": (
        "pod_uid",
        "container",
        "kind",
        "ordinal",
        "name",
        "value",
        "permissions",
        "read_only",
        "resource",
    ),
    "v_run_option_conflicts": (
        "pod_uid",
        "container",
        "kind",
        "name",
        "kept_value",
        "kept_resource",
        "dropped_value",
        "dropped_resource",
    ),
}


@pytest.mark.parametrize("view", sorted(COLUMNS))
def test_view_columns_are_the_documented_ones(store: PodStore, view: str) -> None:
    assert store.query(f"SELECT * FROM {view}").columns == COLUMNS[view]


def test_allocations_and_owners(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a"], 1: ["a", "b"], -1: ["x"]}, None)  # no response
    store.insert("p", "c", "s", {}, b"")  # no devices: no rows
    store.insert("p", "d", "r", {0: ["a"]}, b"")
    assert sorted(store.query("SELECT * FROM v_allocations").rows) == [
        ("p", "c", "r", -1, "x"),
        ("p", "c", "r", 0, "a"),
        ("p", "c", "r", 1, "a"),
        ("p", "c", "r", 1, "b"),
        ("p", "d", "r", 0, "a"),
    ]
    # One row per holder, whatever the NUMA nodes.
    assert sorted(store.query("SELECT * FROM v_device_owners").rows) == [
        ("r", "a", "p", "c"),
        ("r", "a", "p", "d"),
        ("r", "b", "p", "c"),
        ("r", "x", "p", "c"),
    ]


def test_double_allocations(store: PodStore) -> None:
    store.insert("p", "init", "gpu", {0: ["g0"]}, None)
    store.insert("p", "main", "gpu", {0: ["g0"]}, None)  # same pod: reuse, not double
    store.insert("q", "c", "nic", {0: ["g0"]}, None)  # same ID, other resource: other device
    assert store.query("SELECT * FROM v_double_allocations").rows == []
    store.insert("q", "c", "gpu", {1: ["g0"], 0: ["g0"]}, None)
    store.insert("z", "c", "gpu", {-1: ["g0"]}, None)
    assert sorted(store.query("SELECT * FROM v_double_allocations").rows) == [
        ("gpu", "g0", "p", "init", 3),
        ("gpu", "g0", "p", "main", 3),
        ("gpu", "g0", "q", "c", 3),
        ("gpu", "g0", "z", "c", 3),
    ]
    store.delete(["q", "z"])
    assert store.query("SELECT * FROM v_double_allocations").rows == []


def test_run_options_views(store: PodStore) -> None:
    store.insert("p", "c", "b/r", None, ContainerAllocateResponse(envs={"E": "b", "F": "1"}))
    store.insert("p", "c", "a/r", None, ContainerAllocateResponse(envs={"E": "a", "F": "1"}))
    store.insert("p", "c", "c/r", None, ContainerAllocateResponse(envs={"E": "c"}))
    store.insert("p", "d", "a/r", None, ContainerAllocateResponse(envs={"E": "z"}))
    rows = store.query(
        "SELECT pod_uid, container, kind, ordinal, name, value, resource FROM v_run_options "
        "ORDER BY container, ordinal"
    ).rows
    assert rows == [
        ("p", "c", "env", 1, "E", "a", "a/r"),
        ("p", "c", "env", 2, "F", "1", "a/r"),
        ("p", "d", "env", 1, "E", "z", "a/r"),
    ]
    # F=1 twice is no conflict; E differs in b/r and c/r.
    assert store.query("SELECT * FROM v_run_option_conflicts ORDER BY dropped_resource").rows == [
        ("p", "c", "env", "E", "a", "a/r", "b", "b/r"),
        ("p", "c", "env", "E", "a", "a/r", "c", "c/r"),
    ]
    # Replacing the response replaces its rows.
    store.insert("p", "c", "a/r", None, None)
    assert store.query(
        "SELECT name, value, resource FROM v_run_options WHERE container = 'c' ORDER BY ordinal"
    ).rows == [("E", "b", "b/r"), ("F", "1", "b/r")]
