"""Revision 0009 (``cdi_device_nodes`` and the physical views): down and up on a filled store.

The downgrade drops the views and the table and leaves every other row as it was. The upgrade
adds them with the table empty; ``podstore verify`` is clean then, and the next node import
fills the table again, after which the views read what they read before the round trip.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from harness import physical, workload
from harness.refmodel import table_dump

from podstore import PodStore, check_store
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade
from podstore.storage.sql.physical_views import PHYSICAL_VIEWS

VIEWS = [name for name, _ in PHYSICAL_VIEWS]


def _node() -> physical.PhysicalNode:
    return physical.PhysicalNode(
        entries=[
            physical.entry("a", ["GPU-0"], physical.response(cdi=("nvidia.com/gpu=GPU-0",))),
            physical.entry("c", ["GPU-1"], physical.response(host_paths=("/dev/nvidia1",))),
        ],
        registered={physical.GPU: ["GPU-0", "GPU-1"]},
        claims=[physical.claim("b", ["b"], "gpu-0", ["nvidia.com/gpu=GPU-0"])],
    )


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("m0009")
    db = root / "filled.db"
    kubelet, cdi = _node().write(root)
    with PodStore.open(db) as store:
        for i in range(40):
            workload.apply(store, workload.make_op(9, i))
        report = store.import_node(
            kubelet, sysfs=root / "nosys", pod_logs=root / "nologs", cdi_dirs=[cdi]
        )
        assert report.cdi is not None and report.cdi.written == 1
    assert check_store(db) == []
    return db, kubelet, cdi


def _views(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with PodStore.open(db, readonly=True) as store:
        return {v: sorted(store.query(f"SELECT * FROM {v}").rows, key=repr) for v in VIEWS}


def test_down_and_up_keep_every_other_row_and_the_next_import_fills_the_table(
    filled: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    src, kubelet, cdi = filled
    db = tmp_path / "s.db"
    shutil.copy(src, db)
    head = table_dump(db)
    before = _views(db)
    assert head["cdi_device_nodes"]
    # The device plugin's and DRA's holders of card 0 are found.
    assert [r[1] for r in before["v_physical_double_allocations"]] == ["device-plugin", "dra"]

    run_downgrade(ConnectOptions(path=str(db)), "0008")
    down = table_dump(db)
    assert "cdi_device_nodes" not in down
    for name in set(down) - {"alembic_version"}:
        assert down[name] == head[name], name
    conn = sqlite3.connect(db)
    try:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert not names & set(VIEWS)

    run_upgrade(ConnectOptions(path=str(db)), "head")
    up = table_dump(db)
    assert up["cdi_device_nodes"] == []
    for name in set(down) - {"alembic_version"}:
        assert up[name] == down[name], name
    assert check_store(db) == []
    with PodStore.open(db) as store:
        report = store.import_node(
            kubelet, sysfs=tmp_path / "nosys", pod_logs=tmp_path / "nologs", cdi_dirs=[cdi]
        )
        assert report.cdi is not None and report.cdi.written == 1 and report.events == 0
    assert table_dump(db)["cdi_device_nodes"] == head["cdi_device_nodes"]
    assert _views(db) == before
    assert check_store(db) == []
