"""The history's hash chain on the node: every path that appends events writes the hash in the
event's own transaction, pruning keeps the chain checkable, and the interface the fleet side
reads (``storage/events.prev_hash``/``head``, ``storage/sql/ship.py``) says what the node holds.

Each check recomputes the hashes independently of ``storage/chain.verify``: from the stored
columns, the byte rule (``pure/chain.py``) and what each event chains from.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness.chain_support import connect_ro as _conn
from harness.chain_support import recompute

from podstore import (
    ContainerAllocateResponse,
    InvalidInputError,
    PodDevicesEntry,
    PodStore,
    StoreCorruptError,
    check_store,
)
from podstore.checkpoint import dumps_checkpoint
from podstore.pure import chain
from podstore.storage import events
from podstore.storage.sql import ship

RES = "example.com/gpu"
RESP = ContainerAllocateResponse(envs={"A": "1"}).SerializeToString()
FUTURE = datetime.now(UTC) + timedelta(days=1)


def checked(store: PodStore) -> list[int]:
    """The chain holds: recomputed here, by verify_history and by the self-check."""
    seqs = recompute(Path(store.path))
    report = store.verify_history()
    assert report.ok, report.breaks
    assert report.events == len(seqs)
    assert check_store(store.path) == []
    return seqs


def test_every_write_path_chains_its_events(store: PodStore, tmp_path: Path) -> None:
    assert checked(store) == []
    store.insert("p1", "c", RES, {0: ["G1"]}, RESP)
    store.insert("p1", "c", RES, {0: ["G2"]}, None)  # replace
    store.insert("p2", "c", RES, None, b"")
    store.delete(["p2", "nobody"])
    store.set_registered_devices({RES: ["G1", "G2"], "other": None})
    store.from_checkpoint_data([PodDevicesEntry("p3", "c", RES, {-1: ["G3"]}, RESP)])
    store.from_checkpoint_data(  # over 64 entries: the bulk writer
        [PodDevicesEntry(f"bulk{i}", "c", RES, {0: [f"B{i}"]}, RESP) for i in range(70)]
    )
    with store.transaction():
        store.insert("p4", "c", RES, {0: ["G4"]}, None)
        store.delete(["p4"])
    assert checked(store)[-1] == len(store.history())
    cp = tmp_path / "cp"
    cp.write_bytes(
        dumps_checkpoint([PodDevicesEntry("p5", "c", RES, {0: ["G5"]}, RESP)], {RES: ["G5"]})
    )
    store.import_checkpoint(cp, merge=True)
    store.import_checkpoint(cp)  # replacing: deletes every other entry
    checked(store)
    cp.write_bytes(
        dumps_checkpoint(
            [PodDevicesEntry("p5", "c", RES, {0: ["G6"]}, RESP)]
            + [PodDevicesEntry(f"s{i}", "c", RES, {0: [f"S{i}"]}, RESP) for i in range(70)],
            {RES: ["G6"]},
        )
    )
    report = store.sync_checkpoint(cp)
    assert (report.inserted, report.replaced) == (70, 1)
    checked(store)


def test_a_rolled_back_write_leaves_the_chain_where_it_was(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["G1"]}, None)
    conn = _conn(Path(store.path))
    before = events.head(conn)
    with pytest.raises(RuntimeError), store.transaction():
        store.insert("p2", "c", RES, {0: ["G2"]}, None)
        raise RuntimeError("roll back")
    assert events.head(conn) == before
    store.insert("p3", "c", RES, {0: ["G3"]}, None)
    assert events.prev_hash(conn, before[0] + 1) == before[1]
    conn.close()
    checked(store)


def test_prune_keeps_the_chain_checkable(store: PodStore) -> None:
    store.insert("keep", "c", RES, {0: ["K"]}, None)  # 1: carries state, kept
    store.insert("gone", "c", RES, {0: ["X"]}, None)  # 2: pruned
    store.insert("keep", "c", RES, {0: ["K2"]}, None)  # 3: kept (latest of its key)
    store.delete(["gone"])  # 4: pruned
    store.insert("tail", "c", RES, {0: ["T"]}, None)  # 5
    store.delete(["tail"])  # 6: the newest, pruned with 5
    conn = _conn(Path(store.path))
    hashes = dict(conn.execute("SELECT seq, hash FROM allocation_events").fetchall())
    assert store.prune_history(FUTURE) == 5  # all but the latest event of "keep"
    assert [e.seq for e in store.history()] == [3]
    # seq 3 chains from the hash of 2, the seq after the newest (6) from the hash of 6
    assert events.prev_hash(conn, 3) == hashes[2]
    assert events.head(conn) == (6, hashes[6])
    checked(store)
    store.insert("new", "c", RES, {0: ["N"]}, None)
    assert store.history()[-1].seq == 7
    assert events.prev_hash(conn, 7) == hashes[6]
    checked(store)
    store.prune_history(FUTURE + timedelta(days=1))  # prunes nothing live: 3 and 7 stay
    assert [e.seq for e in store.history()] == [3, 7]
    checked(store)
    store.delete(["keep", "new"])
    store.prune_history(FUTURE + timedelta(days=1))  # everything goes
    assert store.history() == []
    checked(store)
    conn.close()


def test_prev_hash_and_head_of_an_empty_and_a_broken_store(store: PodStore) -> None:
    conn = _conn(Path(store.path))
    genesis = chain.genesis(store.store_id)
    assert events.head(conn) == (0, genesis)
    assert events.prev_hash(conn, 1) == genesis
    for bad in (0, -1, True, "2"):
        with pytest.raises(InvalidInputError):
            events.prev_hash(conn, bad)  # type: ignore[arg-type]
    for i in range(3):
        store.insert(f"p{i}", "c", RES, {0: [f"G{i}"]}, None)
    conn.close()
    raw = sqlite3.connect(store.path)
    raw.execute("DELETE FROM allocation_events WHERE seq IN (2, 3)")
    raw.commit()
    raw.close()
    conn = _conn(Path(store.path))
    with pytest.raises(StoreCorruptError, match="broken before seq 3"):
        events.prev_hash(conn, 3)
    # Newest events removed from outside: the node alone cannot tell (the fleet can) ...
    (first,) = conn.execute("SELECT hash FROM allocation_events WHERE seq = 1").fetchone()
    assert events.head(conn) == (1, first)
    conn.close()
    raw = sqlite3.connect(store.path)
    raw.execute("INSERT INTO store_meta VALUES ('history_seq_floor', '3')")
    raw.commit()
    raw.close()
    # ... but a floor above them (prune_history was there) wants the link it would have left.
    conn = _conn(Path(store.path))
    with pytest.raises(StoreCorruptError, match="no head"):
        events.head(conn)
    conn.close()


def test_the_shipping_statements_carry_the_chain(store: PodStore) -> None:
    store.insert("p1", "c", RES, {0: ["G1", "G2"]}, None)
    store.insert("p1", "c", RES, {0: ["G2", "G3"]}, None)  # releases G1
    conn = _conn(Path(store.path))
    rows = conn.execute(ship.EVENTS_AFTER, (0, 10)).fetchall()
    assert rows == conn.execute(ship.EVENTS_BETWEEN, (0, 2)).fetchall()
    (s1, *f1, h1), (s2, *f2, h2) = rows
    assert (s1, s2) == (1, 2) and len(f1) == 7
    assert f2[2:] == ["p1", "c", RES, '{"0":["G2","G3"]}', '["G1"]']
    assert h1 == chain.link(events.prev_hash(conn, 1), 1, *f1)
    assert h2 == chain.link(h1, 2, *f2)
    # only the devices the events list: G1 left with seq 2 but is no device of it
    assert conn.execute(ship.EVENT_DEVICES_BETWEEN, (0, 2)).fetchall() == [
        (1, "G1"),
        (1, "G2"),
        (2, "G2"),
        (2, "G3"),
    ]
    conn.close()
