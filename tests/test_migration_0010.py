"""Revision 0010 (``end`` events, ``v_allocation_intervals``): down and up on a filled store.

The downgrade drops the view and the ``end`` events (each kept event whose predecessor went
gets a link, as ``prune_history`` leaves them: the chain still verifies) and narrows the op
CHECK; every other row stays. The upgrade widens the CHECK and creates the view as revision
0010 froze it (revision 0011 re-creates it as ``storage/sql/intervals.py`` says); end evidence
is recorded again from then on.
"""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from pathlib import Path

import pytest
from harness.refmodel import table_dump

from podstore import PodStore, check_store
from podstore.checkpoint import PodName
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade
from podstore.storage.sql.intervals import V_ALLOCATION_INTERVALS

GPU = "nvidia.com/gpu"
REVISION = (
    Path(__file__).resolve().parent.parent / "migrations/versions/0010_allocation_intervals.py"
)


def _frozen_0010() -> str:
    spec = importlib.util.spec_from_file_location("revision_0010", REVISION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.V_ALLOCATION_INTERVALS)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("m0010") / "filled.db"
    with PodStore.open(db) as store:
        store.set_pod_names({"p1": PodName("ns", "a"), "p2": PodName("ns", "b")})
        store.insert("p1", "main", GPU, {0: ["G1"]}, b"")
        store.insert("p2", "main", GPU, {0: ["G2"]}, b"")
        assert store.record_ends([("p1", "main", "runtime", "2099-01-01T00:00:00Z")]) == 1
        store.insert("p3", "main", GPU, {0: ["G3"]}, b"")
        # The newest event is an end: the downgrade must leave the chain's head linked.
        assert store.record_ends([("p3", "main", "runtime", "2099-01-01T00:00:00Z")]) == 1
    assert check_store(db) == []
    return db


def _view(db: Path) -> str | None:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'v_allocation_intervals'"
        ).fetchone()
    return None if row is None else str(row[0])


def test_down_and_up_keep_every_other_row_and_the_chain(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(filled, db)
    head = table_dump(db)
    assert _view(db) == V_ALLOCATION_INTERVALS.strip()

    run_downgrade(ConnectOptions(path=str(db)), "0009")
    down = table_dump(db)
    assert _view(db) is None
    assert [e for e in down["allocation_events"] if e[2] == "end"] == []
    assert down["allocation_events"] == [e for e in head["allocation_events"] if e[2] != "end"]
    later = {"device_seconds_pruned"}  # revisions after 0010 made it
    for name in set(head) - later - {"alembic_version", "allocation_events",
                                     "history_chain_links", "store_meta"}:  # fmt: skip
        assert down[name] == head[name], name
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO allocation_events (seq, ts, op, resource, hash) "
            "VALUES (99, '2099-01-01T00:00:00.000000Z', 'end', 'x', zeroblob(32))"
        )

    run_upgrade(ConnectOptions(path=str(db)), "0010")
    assert _view(db) == _frozen_0010().strip()
    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert _view(db) == V_ALLOCATION_INTERVALS.strip()
    assert check_store(db) == []
    with PodStore.open(db) as store:
        assert store.verify_history().ok
        # p1's end went with the downgrade; recorded again, it is the only end event.
        assert store.record_ends([("p1", "main", "runtime", "2099-01-01T00:00:00Z")]) == 1
        rows = store.query(
            "SELECT pod_uid, end_source FROM v_allocation_intervals ORDER BY pod_uid"
        ).rows
        assert [tuple(r) for r in rows] == [("p1", "runtime"), ("p2", None), ("p3", None)]
        assert store.verify_history().ok
