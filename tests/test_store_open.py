"""Opening a store: file creation, modes, path forms, lifecycle."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from podstore import PodStore


def test_open_creates_the_file_0600_and_a_missing_parent_0700(tmp_path: Path) -> None:
    path = tmp_path / "new-dir" / "node.db"
    old = os.umask(0)  # the modes must not depend on a permissive umask
    try:
        PodStore.open(path).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_open_accepts_a_path_a_str_and_an_sqlite_url(tmp_path: Path) -> None:
    path = tmp_path / "node.db"
    with PodStore.open(path) as store:
        store.insert("p", "c", "r", None, b"")
        assert os.path.samefile(store.path, path)
    with PodStore.open(str(path)) as store:
        assert store.pods() == {"p"}
    with PodStore.open(f"sqlite:///{path}") as store:
        assert store.pods() == {"p"}
        assert os.path.samefile(store.path, path)


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "node.db"
    PodStore.open(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_a_store_survives_close_and_reopen_with_every_kind_of_state(tmp_path: Path) -> None:
    path = tmp_path / "node.db"
    with PodStore.open(path, durability="normal") as store:
        store.insert("p", "c", "r", {0: ["a"], -1: [], 1: None}, b"")
        store.insert("p", "c", "r2", None, None)
        store.set_registered_devices({"r": ["b", "a"], "z": None})
        entries = store.to_checkpoint_data()
        devices = store.devices()
    with PodStore.open(path) as store:
        assert store.to_checkpoint_data() == entries
        assert store.devices() == devices
        assert store.container_devices("p", "c", "r2") == set()
        assert store.registered_devices() == {"r": ["b", "a"], "z": []}


def test_stats_counts_rows(store: PodStore) -> None:
    store.insert("p1", "c1", "r", {0: ["a", "b"], 1: ["a"]}, b"")
    store.insert("p1", "c2", "r", {0: ["a"]}, None)
    store.insert("p2", "c", "s", None, b"")
    store.set_registered_devices({"r": ["a"]})
    s = store.stats()
    assert (s.pods, s.containers, s.allocations) == (2, 3, 3)
    assert (s.device_rows, s.distinct_devices, s.registered_resources) == (4, 2, 1)
