"""Disk full: writes fail with StoreFullError, nothing is lost, and writing resumes after.

The store lives on an 8 MiB tmpfs the test mounts (root only; other users skip). A ballast file
eats the free space; then every kind of write must fail with StoreFullError, leave the store
exactly as it was (also after closing and reopening on the full disk), and succeed again once
the ballast is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import tinyfs, workload
from harness.figures import report

from podstore import PodDevicesEntry, PodStore, StoreFullError
from podstore.storage.selfcheck import check_store


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    with tinyfs.tiny_fs(tmp_path / "tinyfs") as mnt:
        yield mnt


def _big(i: int) -> dict[int, list[str] | None]:
    return {0: [f"big-{i}-{k:04d}-" + "x" * 40 for k in range(120)]}


@pytest.mark.slow
def test_disk_full_fails_cleanly_and_recovers(tiny_fs: Path) -> None:
    db = tiny_fs / "store.db"
    model = workload.Model()
    store = PodStore.open(db)
    for i in range(25):
        op = workload.make_op(99, i)
        workload.apply(store, op)
        model.apply(op)
    ballast = tiny_fs / "ballast"
    tinyfs.fill(ballast)
    # Fill whatever room the WAL still had; then every write must fail cleanly.
    failures = 0
    accepted = 0
    for i in range(400):
        try:
            store.insert(f"fill-{i}", "c", "example.com/gpu", _big(i), b"")
        except StoreFullError:
            failures += 1
            if failures >= 3:
                break
            continue
        model.apply(
            workload.Op(
                i,
                "insert",
                {
                    "pod": f"fill-{i}",
                    "container": "c",
                    "resource": "example.com/gpu",
                    "devices": _big(i),
                    "resp": b"",
                },
            )
        )
        accepted += 1
    assert failures >= 3, "the tmpfs never filled up"
    before = model.state()
    assert workload.store_state(store) == before

    attempts: dict[str, Callable[[], object]] = {
        "insert": lambda: store.insert("new", "c", "example.com/gpu", _big(10_000), b""),
        "transaction": lambda: _in_transaction(store),
        "from_checkpoint_data": lambda: store.from_checkpoint_data(
            [PodDevicesEntry(f"r{k}", "c", "example.com/nic", _big(k), b"") for k in range(80)]
        ),
        "set_registered_devices": lambda: store.set_registered_devices(
            {"example.com/gpu": [f"reg-{k}-" + "y" * 60 for k in range(2000)]}
        ),
    }
    for name, attempt in attempts.items():
        with pytest.raises(StoreFullError):
            attempt()
        assert workload.store_state(store) == before, name

    # Closing on a full disk (the closing checkpoint may fail) and reopening loses nothing.
    store.close()
    with PodStore.open(db) as again:
        assert workload.store_state(again) == before
    with PodStore.open(db, readonly=True) as ro:
        assert workload.store_state(ro) == before

    # Space comes back: writes work again and the file is sound.
    ballast.unlink()
    with PodStore.open(db) as again:
        again.insert("after", "c", "example.com/gpu", _big(20_000), b"")
        _in_transaction(again)
        assert again.container_devices("after", "c", "example.com/gpu") == set(
            _big(20_000)[0] or ()
        )
    assert check_store(db) == []
    report("diskfull", writes_accepted_while_filling=accepted, full_errors=failures + 4)


def _in_transaction(store: PodStore) -> None:
    with store.transaction():
        store.insert("txn-a", "c", "example.com/gpu", {0: ["a"]}, b"")
        store.insert("txn-b", "c", "example.com/gpu", _big(30_000), b"")


def test_creating_a_store_on_a_full_disk_raises_store_full_error(tiny_fs: Path) -> None:
    tinyfs.fill(tiny_fs / "ballast")
    with pytest.raises(StoreFullError):
        PodStore.open(tiny_fs / "new.db")
