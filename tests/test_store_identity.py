"""Store identity (revision 0003): one random UUID per store, kept for life."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from harness.cli import status_json

from podstore import PodStore, check_store
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade


def _uuid4(value: str) -> uuid.UUID:
    parsed = uuid.UUID(value)
    assert parsed.version == 4 and str(parsed) == value
    return parsed


def test_a_new_store_has_a_uuid4_that_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with PodStore.open(path) as store:
        first = store.store_id
        store.insert("p", "c", "r", {0: ["d"]}, b"")
    _uuid4(first)
    with PodStore.open(path) as store:
        assert store.store_id == first
    with PodStore.open(path, readonly=True) as store:
        assert store.store_id == first


def test_two_stores_and_a_recreated_file_have_different_ids(tmp_path: Path) -> None:
    ids = set()
    for name in ("a.db", "b.db"):
        with PodStore.open(tmp_path / name) as store:
            ids.add(store.store_id)
    assert len(ids) == 2
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"a.db{suffix}").unlink(missing_ok=True)
    with PodStore.open(tmp_path / "a.db") as store:
        assert store.store_id not in ids


def test_upgrading_an_older_store_gives_it_an_id_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with PodStore.open(path) as store:
        store.insert("p", "c", "r", {0: ["d"]}, b"")
    options = ConnectOptions(path=str(path))
    run_downgrade(options, "0002")
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM store_meta WHERE key = 'store_id'").fetchone() == (0,)
    conn.close()
    run_upgrade(options, "head")
    with PodStore.open(path) as store:
        _uuid4(store.store_id)
        assert store.container_devices("p", "c", "r") == {"d"}
    assert check_store(path) == []


def test_status_shows_the_store_id(tmp_path: Path) -> None:
    PodStore.open(tmp_path / "podstore.db").close()  # status only reads: the store must exist
    info = status_json(cwd=tmp_path)
    with PodStore.open(tmp_path / "podstore.db") as store:
        assert info["store_id"] == store.store_id


def test_the_self_check_reports_a_missing_or_malformed_store_id(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    PodStore.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE store_meta SET value = 'not-a-uuid' WHERE key = 'store_id'")
    conn.commit()
    assert [(f.severity, f.check) for f in check_store(path)] == [("error", "store-id")]
    conn.execute("DELETE FROM store_meta WHERE key = 'store_id'")
    conn.commit()
    conn.close()
    assert [(f.severity, f.check) for f in check_store(path)] == [("error", "store-id")]
