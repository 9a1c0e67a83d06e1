"""Revision 0008 (``node_items``, ``node_files.digest``): down and up on a filled store.

The downgrade drops the table, the column and the pending key and leaves every other row as it
was. The upgrade adds them empty with ``node_items_pending`` set; ``podstore verify`` is clean
then, and the first node write fills ``node_items`` from the rows, so that the syncs after it
write exactly what they write on a store that was never taken down (no event for an item that
did not change).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from harness import workload
from harness.nodegen import Node, replace_file
from harness.refmodel import table_dump

from podstore import PodStore, check_store
from podstore.checkpoint import FILE_NAMES, dumps_cpu_state
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Node]:
    root = tmp_path_factory.mktemp("m0008")
    db = root / "filled.db"
    node = Node(6, misaligned={2})
    kubelet, sysfs, logs = node.write_all(root)
    with PodStore.open(db) as store:
        for i in range(40):
            workload.apply(store, workload.make_op(5, i))
        store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
        store.import_node_checkpoint(kubelet / FILE_NAMES["cpu"], kind="cpu")
    assert check_store(db) == []
    return db, node


def _history(db: Path) -> list[tuple[Any, ...]]:
    with PodStore.open(db, readonly=True) as store:
        return [
            (e.seq, e.op, e.pod_uid, e.container_name, e.resource_name) for e in store.history()
        ]


def test_down_and_up_keep_every_other_row_and_the_next_syncs_write_the_same(
    filled: tuple[Path, Node], tmp_path: Path
) -> None:
    src, node = filled
    db, kept = tmp_path / "s.db", tmp_path / "kept.db"
    shutil.copy(src, db)
    shutil.copy(src, kept)
    head = table_dump(db)
    assert head["node_items"] and ("node_items_pending", "1") not in head["store_meta"]

    run_downgrade(ConnectOptions(path=str(db)), "0007")
    down = table_dump(db)
    assert "node_items" not in down
    for name in set(down) - {"alembic_version", "node_files"}:
        assert down[name] == head[name], name
    assert [r[:4] for r in head["node_files"]] == down["node_files"]  # all but the digest

    run_upgrade(ConnectOptions(path=str(db)), "head")
    up = table_dump(db)
    assert up["node_items"] == [] and ("node_items_pending", "1") in up["store_meta"]
    assert [r[:4] for r in up["node_files"]] == down["node_files"]
    assert all(r[4] is None for r in up["node_files"])
    assert check_store(db) == []

    # The same changes on both stores: the upgraded one fills node_items first, then writes
    # only what changed, event for event as the store never taken down.
    root = tmp_path / "files"
    kubelet, _sysfs, _logs = node.write_all(root)
    state = node.cpu()
    state.policy_name = "none"
    replace_file(kubelet / FILE_NAMES["cpu"], dumps_cpu_state(state))
    for path in (db, kept):
        with PodStore.open(path) as store:
            report = store.import_node_checkpoint(kubelet / FILE_NAMES["cpu"], kind="cpu")
            assert report.written == 1 and report.deleted == 0  # the policy only
            store.import_node_checkpoint(kubelet / FILE_NAMES["memory"], kind="memory")
    after = table_dump(db)
    assert after["node_items"] == table_dump(kept)["node_items"]
    assert ("node_items_pending", "1") not in after["store_meta"]
    assert [h[1:] for h in _history(db)] == [h[1:] for h in _history(kept)]
    assert check_store(db) == [] and check_store(kept) == []
