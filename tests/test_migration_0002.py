"""Revision 0002 (decoded responses, history, views) up and down on a store filled at 0001."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from harness.audit_fixture import response_rows_consistent

from podstore import ContainerAllocateResponse, PodStore
from podstore.deviceplugin import CDIDevice, DeviceSpec, Mount
from podstore.pure import run_options
from podstore.sqlite.connection import ConnectOptions, create_sqlalchemy_engine
from podstore.sqlite.migrate import head_revision, run_downgrade, run_upgrade
from podstore.storage.entries import current_entries, current_registered
from podstore.storage.events import replay
from podstore.storage.schema import metadata
from podstore.storage.sql import intervals, node_views, physical_views, views

CORE = (
    "pods",
    "containers",
    "allocations",
    "allocation_devices",
    "empty_numa_lists",
    "registered_resources",
    "registered_devices",
    "store_meta",
)
ADDED_TABLES = {
    "response_envs",
    "response_mounts",
    "response_devices",
    "response_annotations",
    "response_cdi_devices",
    "allocation_events",
    "allocation_event_devices",
}


def _resp(i: int) -> bytes:
    msg = ContainerAllocateResponse(
        envs={"Z": str(i), "A": "shared" if i % 2 else "other"}, annotations={"k": "v"}
    )
    msg.mounts.append(Mount(container_path="/m", host_path=f"/h{i}", read_only=True))
    msg.devices.append(DeviceSpec(container_path="/dev/x", host_path="/dev/x", permissions="rw"))
    msg.cdi_devices.append(CDIDevice(name=f"vendor.com/gpu=gpu{i}"))
    return msg.SerializeToString()


def fill_at_0001(path: Path) -> None:
    """A store at revision 0001, filled with plain SQL as a 0001 podstore would have."""
    run_upgrade(ConnectOptions(path=str(path)), "0001")
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany("INSERT INTO pods (id, uid) VALUES (?, ?)", [(1, "p1"), (2, "p2")])
        conn.executemany(
            "INSERT INTO containers (id, pod_id, name) VALUES (?, ?, ?)",
            [(1, 1, "c"), (2, 1, "d"), (3, 2, "c")],
        )
        conn.executemany(
            "INSERT INTO allocations (id, container_id, resource, device_ids_null, alloc_resp, "
            "alloc_resp_json_null) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (1, 1, "b.io/gpu", 0, _resp(1), 0),
                (2, 1, "a.io/nic", 0, _resp(2), 0),  # conflicts with entry 1 (env A, mount)
                (3, 2, "b.io/gpu", 0, None, 0),  # no response
                (4, 3, "b.io/gpu", 1, b"", 1),  # null map, null AllocResp in the checkpoint
            ],
        )
        conn.executemany(
            "INSERT INTO allocation_devices (allocation_id, numa_node, position, device_id) "
            "VALUES (?, ?, ?, ?)",
            [
                (1, 0, 0, "g0"),
                (1, 0, 1, "g1"),
                (1, 1, 0, "g2"),
                (2, -1, 0, "n0"),
                (3, 0, 0, "g1"),
            ],
        )
        conn.execute(
            "INSERT INTO empty_numa_lists (allocation_id, numa_node, is_null) VALUES (1, 3, 1)"
        )
        conn.executemany(
            "INSERT INTO registered_resources (resource, is_null) VALUES (?, ?)",
            [("b.io/gpu", 0), ("x.io/none", 1)],
        )
        conn.executemany(
            "INSERT INTO registered_devices (resource, position, device_id) VALUES (?, ?, ?)",
            [("b.io/gpu", 0, "g0"), ("b.io/gpu", 1, "g1"), ("b.io/gpu", 2, "g3")],
        )
        conn.execute("INSERT INTO store_meta (key, value) VALUES ('entries_json', 'null')")
    conn.close()


def dump(path: Path, tables: tuple[str, ...] = CORE) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}
    finally:
        conn.close()


def schema_objects(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(
            conn.execute(
                "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            ).fetchall()
        )
    finally:
        conn.close()


def revision(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])
    finally:
        conn.close()


def test_upgrade_backfills_and_downgrade_restores(db_path: Path) -> None:
    fill_at_0001(db_path)
    core_before = dump(db_path)
    objects_at_0001 = schema_objects(db_path)

    with PodStore.open(db_path) as store:  # upgrades to head
        assert revision(db_path) == head_revision()
        # Nothing of 0001 touched; the later revision 0003 adds exactly the store_id row, and
        # 0006 the decoded JSON of each response as a last column of allocations.
        after_upgrade = dump(db_path)
        added = set(after_upgrade["store_meta"]) - set(core_before["store_meta"])
        assert [key for key, _ in added] == ["store_id"]
        after_upgrade["store_meta"] = [r for r in after_upgrade["store_meta"] if r not in added]
        after_upgrade["allocations"] = [r[:-1] for r in after_upgrade["allocations"]]
        assert after_upgrade == core_before

        # Responses decoded into rows, in api.md's order.
        response_rows_consistent(db_path)
        assert store.query(
            "SELECT allocation_id, position, name, value FROM response_envs ORDER BY 1, 2"
        ).rows == [
            (1, 0, "A", "shared"),
            (1, 1, "Z", "1"),
            (2, 0, "A", "other"),
            (2, 1, "Z", "2"),
        ]

        # One backfill event per entry (position order), one registered event per resource.
        events = store.history()
        assert [(e.op, e.pod_uid, e.container_name, e.resource_name) for e in events] == [
            ("backfill", "p1", "c", "b.io/gpu"),
            ("backfill", "p1", "c", "a.io/nic"),
            ("backfill", "p1", "d", "b.io/gpu"),
            ("backfill", "p2", "c", "b.io/gpu"),
            ("registered", None, None, "b.io/gpu"),
            ("registered", None, None, "x.io/none"),
        ]
        assert events[0].device_ids == {0: ["g0", "g1"], 1: ["g2"], 3: None}
        assert events[3].device_ids is None
        assert events[5].device_ids is None
        assert len({e.timestamp for e in events}) == 1
        conn = sqlite3.connect(db_path)
        try:
            state = replay(events)
            assert state.entries == current_entries(conn)
            assert state.registered == current_registered(conn)
        finally:
            conn.close()
        assert store.owners_at("g1", "2100-01-01") == [
            ("p1", "c", "b.io/gpu"),
            ("p1", "d", "b.io/gpu"),
        ]

        # The SQL merge works on backfilled rows exactly as the Python merge on the bytes.
        stored = store.query(
            "SELECT resource, alloc_resp FROM allocations WHERE container_id = 1 ORDER BY resource"
        ).rows
        assert store.device_run_container_options("p1", "c") == run_options.merge("p1", "c", stored)
        assert store.query("SELECT count(*) FROM v_run_option_conflicts").rows == [(3,)]

        # New writes carry on the log after the backfill.
        store.insert("p3", "c", "b.io/gpu", {0: ["g3"]}, None)
        assert store.history()[-1].seq == 7

    run_downgrade(ConnectOptions(path=str(db_path)), "0001")
    assert revision(db_path) == "0001"
    assert schema_objects(db_path) == objects_at_0001
    after = dump(db_path)
    # The core data survives the round trip (plus the entry written at 0002).
    assert after["pods"] == [*core_before["pods"], (3, "p3")]
    assert after["registered_devices"] == core_before["registered_devices"]
    assert {k: v for k, v in after.items() if k not in ("pods", "containers", "allocations",
            "allocation_devices")} == {k: v for k, v in core_before.items() if k not in (
            "pods", "containers", "allocations", "allocation_devices")}  # fmt: skip

    # And up again: the backfill runs once more, from the data as it is now.
    run_upgrade(ConnectOptions(path=str(db_path)), "head")
    with PodStore.open(db_path, readonly=True) as store:
        assert [e.op for e in store.history()].count("backfill") == 5
        response_rows_consistent(db_path)


def test_upgrade_of_an_empty_0001_store(db_path: Path) -> None:
    run_upgrade(ConnectOptions(path=str(db_path)), "0001")
    run_upgrade(ConnectOptions(path=str(db_path)), "0002")
    with PodStore.open(db_path) as store:
        assert store.history() == []
        store.insert("p", "c", "r", {0: ["a"]}, None)
        assert [e.seq for e in store.history()] == [1]


def test_a_response_that_does_not_decode_is_kept_without_rows(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_upgrade(ConnectOptions(path=str(db_path)), "0001")
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("INSERT INTO pods (id, uid) VALUES (1, 'p')")
        conn.execute("INSERT INTO containers (id, pod_id, name) VALUES (1, 1, 'c')")
        conn.execute(
            "INSERT INTO allocations (id, container_id, resource, alloc_resp) "
            "VALUES (1, 1, 'r', x'ffff')"
        )
    conn.close()
    with caplog.at_level(logging.WARNING, logger="podstore"):
        run_upgrade(ConnectOptions(path=str(db_path)), "head")
    assert "does not decode" in caplog.text
    assert dump(db_path, ("response_envs", "allocation_events"))["response_envs"] == []
    assert len(dump(db_path, ("allocation_events",))["allocation_events"]) == 1


def test_head_schema_matches_schema_py_and_the_views_match_views_py(db_path: Path) -> None:
    PodStore.open(db_path).close()
    engine = create_sqlalchemy_engine(f"sqlite:///{db_path}")
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), metadata)
    finally:
        engine.dispose()
    assert diff == []
    conn = sqlite3.connect(db_path)
    try:
        stored = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"
            ).fetchall()
        )
    finally:
        conn.close()
    # The frozen copy in 0002 must still be what views.py says (until a revision changes it);
    # revision 0007's views are node_views.py's, 0009's physical_views.py's, 0011's
    # intervals.py's.
    expected = (
        views.VIEWS
        + views.TRIGGERS
        + node_views.NODE_VIEWS
        + physical_views.PHYSICAL_VIEWS
        + intervals.INTERVAL_VIEWS
    )
    assert stored == {name: sql.strip() for name, sql in expected}
    assert set(schema_objects(db_path)) >= ADDED_TABLES
