"""Revision 0004 (clustered child tables, history seq without AUTOINCREMENT): up and down on a
filled store, the physical layout schema.py asks for, and a seq that is never handed out twice.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness.refmodel import table_dump

from podstore import ContainerAllocateResponse, PodStore
from podstore.deviceplugin import CDIDevice, DeviceSpec, Mount
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import head_revision, run_downgrade, run_upgrade
from podstore.storage.schema import NODE_TABLES, metadata
from podstore.storage.selfcheck import check_store

FLOOR = "history_seq_floor"


def _resp(i: int) -> ContainerAllocateResponse:
    msg = ContainerAllocateResponse(envs={"Z": str(i), "A": "a"}, annotations={"k": str(i)})
    msg.mounts.append(Mount(container_path="/m", host_path=f"/h{i}", read_only=True))
    msg.devices.append(DeviceSpec(container_path="/dev/x", host_path="/dev/x", permissions="rw"))
    msg.cdi_devices.append(CDIDevice(name=f"vendor.com/gpu=gpu{i}"))
    return msg


def _fill(path: Path) -> None:
    """Every kind of row: entries with devices, null and empty NUMA lists, a null map,
    responses of every section, registered devices, replacing inserts, deletes, and a prune
    that removed the newest events (so the seq floor matters)."""
    with PodStore.open(path) as store:
        for i in range(60):
            store.insert(f"pod-{i}", "main", "r.io/gpu", {0: [f"g{i}"], 1: [f"h{i}"]}, _resp(i))
            store.insert(f"pod-{i}", "side", "r.io/nic", {-1: [f"n{i}"], 2: [], 3: None}, b"")
        store.insert("null-map", "c", "r.io/gpu", None, None)
        store.insert("pod-0", "main", "r.io/gpu", {0: ["replaced"]}, _resp(99))
        store.delete([f"pod-{i}" for i in range(50, 60)])
        store.set_registered_devices({"r.io/gpu": ["g0", "g1"], "r.io/nic": None})
        store.insert("gone", "c", "r.io/gpu", {0: ["x"]}, None)
        store.delete(["gone"])
        # The insert and delete of "gone" are the newest events; neither leaves an entry live,
        # so the prune removes both, and max(seq) drops below the highest seq handed out.
        before = store.history()[-1].seq
        removed = store.prune_history(datetime.now(UTC) + timedelta(days=1))
        assert removed > 0
        assert store.history()[-1].seq < before


def _rowid_tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND name <> 'alembic_version' AND upper(sql) NOT LIKE '%WITHOUT ROWID%'"
            )
        }
    finally:
        conn.close()


def _sequence(path: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(path)
    try:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
        ).fetchone():
            return []
        return conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
    finally:
        conn.close()


def _meta(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("m0004") / "filled.db"
    _fill(path)
    return path


def test_head_has_the_layout_schema_py_asks_for(filled: Path) -> None:
    clustered = {
        t.name
        for t in metadata.tables.values()
        if t.dialect_options["sqlite"]["with_rowid"] is False
    }
    # At head (revision 0006 made the device rows, the decoded response rows and the event
    # device rows views over what it stores once: spans and event_device_rows).
    # (revision 0009's cdi_device_nodes is clustered too: tests/test_migration_0009.py; and
    # revision 0012's device_seconds_pruned: tests/test_migration_0012.py)
    assert clustered - set(NODE_TABLES) - {"cdi_device_nodes", "device_seconds_pruned"} == {
        "allocation_device_spans",
        "empty_numa_lists",
        "registered_resources",
        "registered_devices",
        "store_meta",
        "event_device_rows",
    }
    assert _rowid_tables(filled) == set(metadata.tables) - clustered
    assert _sequence(filled) == []  # no AUTOINCREMENT table left
    assert not metadata.tables["allocation_events"].dialect_options["sqlite"]["autoincrement"]


def _at_0004(filled: Path, db: Path) -> dict[str, list[tuple[object, ...]]]:
    """A copy of the filled store taken down to 0004 (the revision under test; later ones
    add their own columns), and its rows."""
    db.write_bytes(filled.read_bytes())
    run_downgrade(ConnectOptions(path=str(db)), "0004")
    return table_dump(db)


def test_downgrade_and_upgrade_keep_every_row(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.db"
    at_0004 = _at_0004(filled, db)
    top = int(_meta(db)[FLOOR])
    assert top > max(r[0] for r in at_0004["allocation_events"])

    run_downgrade(ConnectOptions(path=str(db)), "0003")
    down = table_dump(db)
    # 0003 keeps the floor where AUTOINCREMENT keeps it: in sqlite_sequence.
    assert _sequence(db) == [("allocation_events", top)]
    assert FLOOR not in _meta(db)
    skip = ("store_meta", "alembic_version")
    assert {k: v for k, v in down.items() if k not in skip} == {
        k: v for k, v in at_0004.items() if k not in skip
    }
    assert _rowid_tables(db) == {"pods", "containers", "allocations"} | {
        t for t in at_0004 if t != "alembic_version"
    }
    assert check_store(db) != []  # a store below head is reported by verify

    run_upgrade(ConnectOptions(path=str(db)), "0004")
    assert table_dump(db) == at_0004
    assert int(_meta(db)[FLOOR]) == top
    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert check_store(db) == []
    with PodStore.open(db, upgrade=False) as store:
        store.insert("after", "c", "r.io/gpu", {0: ["y"]}, None)
        assert store.history()[-1].seq == top + 1
    assert check_store(db) == []


def test_open_upgrades_a_filled_0003_store(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    at_0004 = _at_0004(filled, tmp_path / "ref.db")
    db.write_bytes(filled.read_bytes())
    run_downgrade(ConnectOptions(path=str(db)), "0003")
    before = table_dump(db)
    with PodStore.open(db) as store:  # migrate on open
        assert store.wait_verified(timeout=60)
        entries = store.to_checkpoint_data()
        history = store.history()
    run_downgrade(ConnectOptions(path=str(db)), "0004")  # compare at the revision under test
    after = table_dump(db)
    skip = ("store_meta", "alembic_version")
    assert {k: v for k, v in after.items() if k not in skip} == {
        k: v for k, v in before.items() if k not in skip
    }
    assert after.keys() == at_0004.keys()
    assert len(entries) == 100 and len(history) == len(before["allocation_events"])
    run_upgrade(ConnectOptions(path=str(db)), "head")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
        (head_revision(),)
    ]
    conn.close()
    assert check_store(db) == []


def test_a_seq_is_never_handed_out_twice(tmp_path: Path) -> None:
    """Pruning the newest events leaves max(seq) below the last seq handed out; the next event
    still gets a new number, also from another connection and after a reopen."""
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "r", {0: ["a"]}, None)
        store.delete(["p"])
        last = store.history()[-1].seq
        assert store.prune_history(datetime.now(UTC) + timedelta(days=1)) == 2
        assert store.history() == []
    with PodStore.open(db) as store:
        store.insert("q", "c", "r", {0: ["b"]}, None)
        assert [e.seq for e in store.history()] == [last + 1]
        with store.transaction():
            store.insert("r", "c", "r", None, None)
            store.delete(["q"])
        assert [e.seq for e in store.history()] == [last + 1, last + 2, last + 3]
