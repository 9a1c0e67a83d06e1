"""The row lock that makes shipping exactly once: a batch reads ``last_seq`` only once it holds
the store's ``fleet_stores`` row (docs/fleet.md).

That is why ``ON CONFLICT DO NOTHING`` in the batch insert never fires, and why it cannot show
that the lock works: a batch that read ``last_seq`` before the lock would send events another
shipper had just sent, and DO NOTHING would skip the second copies without a trace (the
counts come from RETURNING). So the lock is tested here directly.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
from harness.fleetlib import fleet_events, node_events
from harness.watch_support import podstore_command

from podstore import PodStore


def _ship(db: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*podstore_command(), "--db", str(db), "ship", "--to", url, "--node", "n1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _grow(store: PodStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        store.insert(f"pod-{i}", "main", "example.com/gpu", {0: [f"GPU-{i}"]}, b"")


def test_a_ship_reads_last_seq_only_once_it_holds_the_store_row(
    tmp_path: Path, fleet_url: str
) -> None:
    """A test transaction plays another shipper: it holds the store's row while a ship starts,
    then records the node's newest seq as shipped and commits. The ship must have waited for
    the row before reading ``last_seq``: it then finds everything shipped and sends nothing.
    (A ship that read ``last_seq`` first would send the five events again, and DO NOTHING
    would let that pass silently.)"""
    db = tmp_path / "node.db"
    with PodStore.open(db) as store:
        _grow(store, 0, 5)
        first = _ship(db, fleet_url)
        assert first.wait(60) == 0, first.communicate()[1]
        shipped = fleet_events(fleet_url, store.store_id)
        _grow(store, 5, 5)
        newest = node_events(store)[-1][0]
        with store.reader() as reader:
            _, head = reader.chain_head()  # what the other shipper's batch would leave
        with psycopg.connect(fleet_url) as holder:
            locked = holder.execute(
                "SELECT last_seq FROM fleet_stores WHERE store_id = %s FOR UPDATE",
                (store.store_id,),
            ).fetchone()
            assert locked is not None and locked[0] < newest
            second = _ship(db, fleet_url)
            try:
                time.sleep(1.5)  # a ship that does not wait for the row is done by now
                assert second.poll() is None, second.communicate()[1]
                assert fleet_events(fleet_url, store.store_id) == shipped
                holder.execute(
                    "UPDATE fleet_stores SET last_seq = %s, head_hash = %s WHERE store_id = %s",
                    (newest, head, store.store_id),
                )
                holder.commit()
            finally:
                holder.rollback()
        out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert f"shipped 0 events of store {store.store_id}" in out, out
    assert f"it holds seq {newest}" in out, out
    assert fleet_events(fleet_url, store.store_id) == shipped  # it sent nothing
