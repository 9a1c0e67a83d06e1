"""store.transaction(): all or nothing, nested blocks, and calls that fail inside a block."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from harness.refmodel import resp, store_dump, table_dump

from podstore import (
    InvalidInputError,
    PodDevicesEntry,
    PodStore,
    PodStoreError,
    ReadOnlyStoreError,
)

RES = "vendor.com/dev"


class Boom(Exception):
    pass


def _seed(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["a"], -1: ["b"]}, resp(envs={"A": "1"}))
    store.insert("p2", "c", RES, {1: ["c"]}, None)
    store.set_registered_devices({RES: ["a", "b", "c"]})


def _add_trigger(path: Path) -> None:
    """Make SQLite itself fail an insert half-way through: a device row named 'boom' aborts."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE TRIGGER test_boom BEFORE INSERT ON allocation_device_spans "
            "WHEN NEW.device_id = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )
        conn.commit()
    finally:
        conn.close()


def test_a_block_that_raises_midway_leaves_no_trace(store: PodStore) -> None:
    _seed(store)
    before = store_dump(store)
    with pytest.raises(Boom), store.transaction() as tx:
        assert tx is store
        store.insert("p3", "c", RES, {0: ["d"]}, b"")
        store.insert("p1", "c", RES, {0: ["changed"]}, b"")
        store.delete(["p2"])
        store.set_registered_devices({"x": ["y"]})
        store.from_checkpoint_data([PodDevicesEntry("p4", "c", RES, {0: ["e"]}, None)])
        # Inside the block the changes are visible to this thread.
        assert store.pods() == {"p1", "p3", "p4"}
        raise Boom
    assert store_dump(store) == before
    # The store is usable afterwards, and a plain call commits on its own again.
    store.insert("p5", "c", RES, None, b"")
    assert "p5" in table_dump(store.path).__repr__()


def test_base_exceptions_roll_back_too(store: PodStore) -> None:
    _seed(store)
    before = store_dump(store)
    with pytest.raises(KeyboardInterrupt), store.transaction():
        store.delete(["p1", "p2"])
        raise KeyboardInterrupt
    assert store_dump(store) == before


def test_a_block_commits_once_at_the_end(store: PodStore) -> None:
    seen_inside: list[int] = []
    with store.transaction():
        store.insert("p1", "c", RES, {0: ["a"]}, b"")
        store.insert("p2", "c", RES, {0: ["b"]}, b"")
        # A separate connection does not see the uncommitted rows.
        seen_inside.append(len(table_dump(store.path)["pods"]))
    assert seen_inside == [0]
    assert len(table_dump(store.path)["pods"]) == 2


def test_other_threads_see_all_or_nothing(store: PodStore) -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: list[set[str]] = []

    def reader() -> None:
        inside.wait(5)
        seen.append(store.pods())  # its own connection: only committed data
        release.set()

    t = threading.Thread(target=reader)
    t.start()
    with store.transaction():
        store.insert("p1", "c", RES, None, b"")
        inside.set()
        assert release.wait(5)
        store.insert("p2", "c", RES, None, b"")
    t.join()
    assert seen == [set()]
    assert store.pods() == {"p1", "p2"}


def test_nested_block_that_raises_is_undone_alone(store: PodStore) -> None:
    with store.transaction():
        store.insert("outer1", "c", RES, None, b"")
        with pytest.raises(Boom), store.transaction():
            store.insert("inner", "c", RES, None, b"")
            store.delete(["outer1"])
            raise Boom
        assert store.pods() == {"outer1"}
        store.insert("outer2", "c", RES, None, b"")
    assert store.pods() == {"outer1", "outer2"}
    assert len(table_dump(store.path)["pods"]) == 2


def test_nested_blocks_commit_with_the_outer_one(store: PodStore) -> None:
    with store.transaction():
        store.insert("a", "c", RES, None, b"")
        with store.transaction():
            store.insert("b", "c", RES, None, b"")
            with store.transaction():
                store.insert("c", "c", RES, None, b"")
        assert table_dump(store.path)["pods"] == []
    assert store.pods() == {"a", "b", "c"}


def test_outer_failure_undoes_completed_inner_blocks(store: PodStore) -> None:
    _seed(store)
    before = store_dump(store)
    with pytest.raises(Boom), store.transaction():
        with store.transaction():
            store.insert("inner", "c", RES, None, b"")
        store.insert("outer", "c", RES, None, b"")
        raise Boom
    assert store_dump(store) == before


def test_a_refused_call_caught_inside_a_block_changes_nothing(store: PodStore) -> None:
    _seed(store)
    with store.transaction():
        store.insert("p3", "c", RES, None, b"")
        with pytest.raises(InvalidInputError):
            store.insert("p4", "c", RES, {0: ["ok", 5]}, b"")  # type: ignore[list-item]
        with pytest.raises(InvalidInputError):
            store.from_checkpoint_data(
                [
                    PodDevicesEntry("p5", "c", RES, {0: ["ok"]}, b""),
                    PodDevicesEntry("p6", "c", RES, {"0": ["x"]}, b""),  # type: ignore[dict-item]
                ]
            )
    assert store.pods() == {"p1", "p2", "p3"}


def test_a_call_failing_halfway_in_sqlite_leaves_nothing_inside_a_block(
    db_path: Path,
) -> None:
    with PodStore.open(db_path) as store:
        _seed(store)
    _add_trigger(db_path)
    with PodStore.open(db_path) as store:
        with store.transaction():
            store.insert("p3", "c", RES, None, b"")
            # The pod, container and allocation rows go in before the device row fails.
            with pytest.raises(PodStoreError, match="boom"):
                store.insert("p4", "c", RES, {0: ["fine", "boom"]}, b"")
            with pytest.raises(PodStoreError, match="boom"):
                store.insert("p1", "c", RES, {0: ["boom"]}, b"")  # a replacing insert
            assert store.pods() == {"p1", "p2", "p3"}
        tables = table_dump(db_path)
        assert [r[1] for r in tables["pods"]] == ["p1", "p2", "p3"]
        assert store.container_devices("p1", "c", RES) == {"a", "b"}
        assert len(tables["containers"]) == 3
        assert len(tables["allocations"]) == 3


def test_a_call_failing_halfway_in_sqlite_leaves_nothing_on_its_own(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        _seed(store)
    _add_trigger(db_path)
    with PodStore.open(db_path) as store:
        before = store_dump(store)
        with pytest.raises(PodStoreError, match="boom"):
            store.insert("p4", "c", RES, {0: ["fine", "boom"]}, b"")
        with pytest.raises(PodStoreError, match="boom"):
            store.from_checkpoint_data(
                [PodDevicesEntry(f"n{i}", "c", RES, {0: [f"d{i}"]}, b"") for i in range(70)]
                + [PodDevicesEntry("last", "c", RES, {0: ["boom"]}, b"")]
            )
        assert store_dump(store) == before
        store.insert("p5", "c", RES, {0: ["fine"]}, b"")  # not stuck in a transaction
        assert "p5" in store


def test_read_only_store_refuses_writes_and_transactions(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        _seed(store)
    before = table_dump(db_path)
    with PodStore.open(db_path, readonly=True) as ro:
        assert ro.readonly
        assert ro.pods() == {"p1", "p2"}
        assert ro.to_checkpoint_data()[0].pod_uid == "p1"
        with pytest.raises(ReadOnlyStoreError):
            ro.insert("p", "c", RES, None, None)
        with pytest.raises(ReadOnlyStoreError):
            ro.delete(["p1"])
        with pytest.raises(ReadOnlyStoreError):
            ro.set_registered_devices({})
        with pytest.raises(ReadOnlyStoreError), ro.transaction():
            pass
    assert table_dump(db_path) == before


def test_a_closed_store_refuses_calls(db_path: Path) -> None:
    store = PodStore.open(db_path)
    store.insert("p", "c", RES, None, b"")
    store.close()
    with pytest.raises(PodStoreError, match="closed"):
        store.pods()
    with pytest.raises(PodStoreError, match="closed"):
        store.insert("q", "c", RES, None, b"")
    store.close()  # idempotent
    with PodStore.open(db_path) as again:
        assert again.pods() == {"p"}
