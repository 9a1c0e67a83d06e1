"""Revision 0011 (shares fixed when a holding begins): down and up on a filled store.

The view at head is ``storage/sql/intervals.py``'s, which is revision 0011's frozen copy;
revision 0010's copy stays what 0010 created. The downgrade re-creates 0010's view (the
shares of the devices now) and changes no row; the upgrade brings the fixed shares back.
"""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest
from harness.refmodel import table_dump

from podstore import PodStore, check_store
from podstore.checkpoint import DRAClaim, DRADevice, DRAState
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade
from podstore.storage.sql.intervals import V_ALLOCATION_INTERVALS

VERSIONS = Path(__file__).resolve().parent.parent / "migrations" / "versions"
SHARED = "nvidia.com/gpu.shared"


def revision(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"revision_{name[:4]}", VERSIONS / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def claim(name: str) -> DRAClaim:
    device = DRADevice("pool", "gpu-0", ["gpu"], [], f"s-{name}")
    return DRAClaim(f"{name}-c1a1-4000-8000-000000000000", name, "ns", frozenset({f"p{name}"}),
                    {"gpu.example.com": [device]})  # fmt: skip


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("m0011") / "filled.db"
    with PodStore.open(db) as store:
        store.set_registered_devices({SHARED: ["GPU-6::0", "GPU-6::1"]})
        store.insert("p1", "main", SHARED, {0: ["GPU-6::0"]}, b"")
        store.set_registered_devices({SHARED: [f"GPU-6::{r}" for r in range(4)]})
        store.set_dra_state(DRAState([claim("a"), claim("b")], share_ids=True))
    assert check_store(db) == []
    return db


def _view(db: Path) -> str | None:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'v_allocation_intervals'"
        ).fetchone()
    return None if row is None else str(row[0])


def _shares(db: Path) -> dict[str, float]:
    """Read with SQLite alone: a store below head does not open read-only."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT pod_uid, share FROM v_allocation_intervals").fetchall()
    return {r[0]: r[1] for r in rows}


def test_the_module_is_0011s_frozen_copy_and_0010s_is_untouched() -> None:
    assert V_ALLOCATION_INTERVALS == revision("0011_fixed_shares.py").V_ALLOCATION_INTERVALS
    frozen_0010 = revision("0010_allocation_intervals.py").V_ALLOCATION_INTERVALS
    assert frozen_0010 != V_ALLOCATION_INTERVALS
    # 0010's view took the share of the devices now (v_device_identity's) for every holding.
    assert "ELSE coalesce(d.share, 1.0) END AS share" in frozen_0010
    assert "replica_counts" not in frozen_0010


def test_down_and_up_change_only_the_view(filled: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(filled, db)
    head = table_dump(db)
    assert _view(db) == V_ALLOCATION_INTERVALS.strip()
    fixed = {"p1": 0.5, "pa": 1.0, "pb": 1.0}
    assert _shares(db) == fixed

    run_downgrade(ConnectOptions(path=str(db)), "0010")
    assert _view(db) == revision("0010_allocation_intervals.py").V_ALLOCATION_INTERVALS.strip()
    down = table_dump(db)
    later = {"device_seconds_pruned"}  # revision 0012 made it
    for name in set(head) - later - {"alembic_version"}:
        assert down[name] == head[name], name
    # 0010's shares: the replicas registered now, the claims holding the device now.
    assert _shares(db) == {"p1": 0.25, "pa": 0.5, "pb": 0.5}

    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert _view(db) == V_ALLOCATION_INTERVALS.strip()
    assert check_store(db) == []
    assert _shares(db) == fixed
