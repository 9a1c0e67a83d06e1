"""Revision 0007 (the CPU, memory and DRA managers, topology and pod names): down and up on
filled stores.

The downgrade drops the node's tables and views and its events, linking the chain over them
the way ``prune_history`` does, so the device history stays checkable; the device tables are
left row for row. The upgrade of a filled 0006 store adds empty node tables beside an intact
device state and history.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import workload
from harness.nodegen import Node, replace_file
from harness.refmodel import table_dump
from harness.watch_support import podstore_command

from podstore import PodStore, check_store
from podstore.checkpoint import FILE_NAMES, dumps_cpu_state
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade
from podstore.storage.sql.node_views import NODE_VIEWS

NODE_TABLES = {
    "node_files",
    "cpu_assignments",
    "cpu_assignment_cpus",
    "cpu_shared",
    "memory_assignments",
    "memory_blocks",
    "memory_block_numa",
    "memory_numa_nodes",
    "memory_numa_tables",
    "dra_claims",
    "dra_claim_pods",
    "dra_claim_drivers",
    "dra_devices",
    "numa_cpus",
    "pod_names",
}
HISTORY = {
    "allocation_events",
    "allocation_event_devices",
    "event_device_rows",
    "history_chain_links",
    "store_meta",
}
VIEWS_SQL = [
    "SELECT * FROM v_container_numa ORDER BY pod_uid, container",
    "SELECT * FROM v_cpu_assignments ORDER BY pod_uid, container, cpu",
    "SELECT * FROM v_memory_numa ORDER BY numa_node, memory_type",
    "SELECT * FROM v_dra_devices ORDER BY claim_uid, driver, pool, device",
    "SELECT * FROM v_pod_names ORDER BY pod_uid",
]


def _views(db: Path) -> list[list[tuple[Any, ...]]]:
    with PodStore.open(db, readonly=True) as store:
        return [[tuple(r) for r in store.query(q).rows] for q in VIEWS_SQL]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Device events before, between and after the node's; the node loaded, then changed."""
    root = tmp_path_factory.mktemp("m0007")
    db = root / "filled.db"
    node = Node(6, misaligned={2})
    kubelet, sysfs, logs = node.write_all(root)
    with PodStore.open(db) as store:
        for i in range(60):
            workload.apply(store, workload.make_op(3, i))
        store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
        for i in range(60, 90):
            workload.apply(store, workload.make_op(3, i))
        state = node.cpu()
        state.policy_name = "none"
        replace_file(kubelet / FILE_NAMES["cpu"], dumps_cpu_state(state))
        store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)  # the node's events are newest
    assert check_store(db) == []
    return db


def _names(dump: dict[str, Any]) -> set[str]:
    return set(dump)


def test_downgrade_drops_the_node_and_keeps_the_device_history_checkable(
    filled: Path, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    shutil.copy(filled, db)
    head = table_dump(db)
    views = _views(db)
    run_downgrade(ConnectOptions(path=str(db)), "0006")
    down = table_dump(db)
    assert _names(head) >= NODE_TABLES and not NODE_TABLES & _names(down)
    for name in _names(down) - HISTORY - {"alembic_version"}:
        assert down[name] == head[name], name
    node_ops = {r[2] for r in head["allocation_events"]} - {r[2] for r in down["allocation_events"]}
    assert {"cpu-set", "memory-set", "dra-set", "node-set"} <= node_ops
    assert all(not r[2].startswith(("cpu-", "memory-", "dra-", "node-")) for r in
               down["allocation_events"])  # fmt: skip
    kept = {r[0] for r in down["allocation_events"]}
    assert [r for r in head["allocation_events"] if r[0] in kept] == down["allocation_events"]
    # The device rows of the events kept stay; those of the node's events go with them.
    assert [r for r in head["event_device_rows"] if r[0] in kept] == down["event_device_rows"]
    assert check_store(db) != []  # below head

    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert check_store(db) == []
    with PodStore.open(db) as store:
        assert store.verify_history().ok
        assert store.cpu_state() is None and store.pod_names() == {}
        # A new import brings the views back to what they said, on a checkable chain.
        root = filled.parent
        store.import_node(root / "kubelet", sysfs=root / "sys", pod_logs=root / "pods")
        assert store.verify_history().ok
    assert _views(db) == views
    assert check_store(db) == []


def test_the_cli_downgrade_names_what_it_drops(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(filled, db)
    before = table_dump(db)
    res = subprocess.run(
        [*podstore_command(), "--db", str(db), "migrate", "downgrade", "0006"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert "cpu_assignments" in res.stdout + res.stderr
    assert table_dump(db) == before


def test_upgrade_of_a_filled_0006_store(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        for i in range(120):
            workload.apply(store, workload.make_op(11, i))
    run_downgrade(ConnectOptions(path=str(db)), "0006")
    old = table_dump(db)
    run_upgrade(ConnectOptions(path=str(db)), "0007")  # 0008: tests/test_migration_0008.py
    new = table_dump(db)
    for name in _names(old) - {"alembic_version"}:
        assert new[name] == old[name], name
    for name in NODE_TABLES:
        assert new[name] == [], name
    with PodStore.open(db) as store:
        views = {v for (v,) in store.query(
            "SELECT name FROM sqlite_master WHERE type = 'view'").rows}  # fmt: skip
        assert {name for name, _ in NODE_VIEWS} <= views
        root = filled.parent
        report = store.import_node(root / "kubelet", sysfs=root / "sys", pod_logs=root / "pods")
        assert report.events > 0 and store.verify_history().ok
    assert check_store(db) == []
