"""Revision 0005 (the history's hash chain and released devices): down and up on filled stores.

The upgrade chains what is there from the genesis of the store_id, links the gaps pruning left
(and the seq after the newest when the newest were pruned), and derives ``released`` where the
previous event of the same key is still kept; the downgrade gives back the 0004 tables row for
row.
"""

from __future__ import annotations

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness.refmodel import table_dump

from podstore import PodDevicesEntry, PodStore, check_store
from podstore.pure import chain
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade

RES = "example.com/gpu"
CHAIN_TABLES = ("allocation_events", "allocation_event_devices", "history_chain_links")


def _fill(path: Path, tmp: Path) -> None:
    """Every kind of event, released devices from every writer, and a prune that left gaps in
    the middle: some releases before it (whose previous event it removed), the others after
    it (whose previous event it kept, as the state at the cut)."""
    from podstore.checkpoint import dumps_checkpoint

    with PodStore.open(path) as store:
        store.insert("first", "c", RES, {0: ["F"]}, None)  # seq 1, never touched again
        for i in range(40):
            store.insert(f"pod-{i}", "c", RES, {0: [f"g{i}", f"h{i}"]}, b"")
        store.insert("pod-39", "c", RES, {0: ["h39"]}, b"")  # released before the cut
        store.delete([f"pod-{i}" for i in range(10, 15)])
        cut = datetime.now(UTC) + timedelta(microseconds=1)
        for i in range(0, 40, 2):
            store.insert(f"pod-{i}", "c", RES, {0: [f"h{i}", f"x{i}"]}, b"")  # releases g{i}
        store.from_checkpoint_data(
            [PodDevicesEntry(f"pod-{i}", "c", RES, {1: [f"y{i}"]}, b"") for i in range(30, 39)]
        )
        store.from_checkpoint_data(  # the bulk writer, new and then over existing entries
            [PodDevicesEntry(f"bulk-{i}", "c", RES, {0: [f"b{i}"]}, b"") for i in range(70)]
        )
        store.from_checkpoint_data(
            [PodDevicesEntry(f"bulk-{i}", "c", RES, {0: [f"c{i}"]}, b"") for i in range(70)]
        )
        cp = tmp / "cp"
        cp.write_bytes(
            dumps_checkpoint(
                [PodDevicesEntry(f"pod-{i}", "c", RES, {0: ["s"]}, b"") for i in range(5)],
                {RES: ["s"]},
            )
        )
        store.import_checkpoint(cp, merge=True)
        store.set_registered_devices({RES: ["a", "b"], "other": None})
        store.delete([f"pod-{i}" for i in range(15, 20)])
        assert store.prune_history(cut) > 0
    assert check_store(path) == []


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("m0005")
    path = tmp / "filled.db"
    _fill(path, tmp)
    return path


def _copy(filled: Path, target: Path) -> Path:
    target.write_bytes(filled.read_bytes())
    return target


def _columns(path: Path, table: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def _previous_kept(rows: list[tuple[Any, ...]]) -> dict[int, tuple[Any, ...] | None]:
    """seq → the previous kept event of its key (None: none kept)."""
    last: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    out: dict[int, tuple[Any, ...] | None] = {}
    for row in sorted(rows):
        key = (row[3], row[4], row[5])
        out[row[0]] = last.get(key) if row[3] is not None else None
        last[key] = row
    return out


def test_downgrade_gives_back_the_0004_tables_and_upgrade_chains_them(
    filled: Path, tmp_path: Path
) -> None:
    db = _copy(filled, tmp_path / "copy.db")
    # The revision under test as the store was at it (later revisions change other tables).
    run_downgrade(ConnectOptions(path=str(db)), "0005")
    head = table_dump(db)
    assert head["history_chain_links"], "the fill left no gap"
    run_downgrade(ConnectOptions(path=str(db)), "0004")
    down = table_dump(db)
    assert "history_chain_links" not in down
    assert _columns(db, "allocation_events")[-1] == "device_ids"
    assert _columns(db, "allocation_event_devices") == ["seq", "device_id"]
    assert down["allocation_events"] == [r[:7] for r in head["allocation_events"]]
    assert down["allocation_event_devices"] == sorted(
        (r[:2] for r in head["allocation_event_devices"] if not r[2]), key=repr
    )
    # Tables of later revisions (0007's, empty here) go with them.
    for name in (set(head) & set(down)) - set(CHAIN_TABLES) - {"alembic_version"}:
        assert down[name] == head[name], name
    assert check_store(db) != []  # below head

    run_upgrade(ConnectOptions(path=str(db)), "0005")
    up = table_dump(db)
    for name in set(head) - set(CHAIN_TABLES):
        assert up[name] == head[name], name
    assert [r[:7] for r in up["allocation_events"]] == [r[:7] for r in head["allocation_events"]]
    # released: as written wherever the previous event of the key is kept, else NULL
    previous = _previous_kept(up["allocation_events"])
    derived = lost = 0
    for was, now in zip(head["allocation_events"], up["allocation_events"], strict=True):
        if now[2] in ("replace", "import") and previous[now[0]] is not None:
            assert now[7] == was[7], now
            derived += now[7] is not None
        else:
            assert now[7] is None, now
            lost += was[7] is not None
    assert derived >= 20 + 9 + 70 and lost == 1  # pod-39's release went with its predecessor
    assert {r[:2] for r in up["allocation_event_devices"] if not r[2]} == {
        r[:2] for r in head["allocation_event_devices"] if not r[2]
    }
    # Up to the first gap the chain is the one written at head; after it, links made by the
    # upgrade hold the hash of the last kept event before each gap.
    seqs = [r[0] for r in up["allocation_events"]]
    first_gap = next(s for a, s in itertools.pairwise(seqs) if s != a + 1)
    assert [r[8] for r in up["allocation_events"] if r[0] < first_gap] == [
        r[8] for r in head["allocation_events"] if r[0] < first_gap
    ]
    assert {r[0] for r in up["history_chain_links"]} == {r[0] for r in head["history_chain_links"]}
    run_upgrade(ConnectOptions(path=str(db)), "head")
    assert check_store(db) == []
    with PodStore.open(db, upgrade=False) as store:
        store.insert("after", "c", RES, {0: ["z"]}, None)
        assert store.verify_history().ok
    assert check_store(db) == []


def test_upgrade_of_a_0004_store_shows_the_release_the_issue_asks_for(tmp_path: Path) -> None:
    """issue 23 item 9: insert p1 {G1}, replace p1 {G2}, insert p2 {G1}, written before 0005:
    after the upgrade history(device_id="G1") shows the replace releasing G1."""
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        pass
    run_downgrade(ConnectOptions(path=str(db)), "0004")
    conn = sqlite3.connect(db)
    conn.executemany(
        "INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, device_ids) "
        "VALUES (?, ?, ?, ?, 'c', 'gpu', ?)",
        [
            (1, "2026-12-01T10:00:00.000000Z", "insert", "p1", '{"0":["G1"]}'),
            (2, "2026-12-01T10:00:01.000000Z", "replace", "p1", '{"0":["G2"]}'),
            (3, "2026-12-01T10:00:02.000000Z", "insert", "p2", '{"0":["G1"]}'),
        ],
    )
    conn.executemany(
        "INSERT INTO allocation_event_devices VALUES (?, ?)", [(1, "G1"), (2, "G2"), (3, "G1")]
    )
    conn.commit()
    conn.close()
    with PodStore.open(db) as store:  # upgrades
        shown = [(e.seq, e.op, e.pod_uid, e.released) for e in store.history(device_id="G1")]
        assert shown == [
            (1, "insert", "p1", []),
            (2, "replace", "p1", ["G1"]),
            (3, "insert", "p2", []),
        ]
        assert store.owners_at("G1", "2026-12-01T10:00:01.5Z") == []
        assert store.owners_at("G1", "2026-12-01T10:00:00.5Z") == [("p1", "c", "gpu")]
        assert store.owners_at("G1", "2026-12-01T10:00:03Z") == [("p2", "c", "gpu")]
        report = store.verify_history()
        genesis = chain.genesis(store.store_id)
    assert report.ok and report.head_seq == 3
    assert report.head_hash == chain.link(
        chain.link(
            chain.link(genesis, 1, "2026-12-01T10:00:00.000000Z", "insert", "p1", "c", "gpu",
                       '{"0":["G1"]}', None),
            2, "2026-12-01T10:00:01.000000Z", "replace", "p1", "c", "gpu", '{"0":["G2"]}',
            '["G1"]',
        ),
        3, "2026-12-01T10:00:02.000000Z", "insert", "p2", "c", "gpu", '{"0":["G1"]}', None,
    )  # fmt: skip


def test_upgrade_links_a_pruned_tail_to_where_the_chain_stands(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("keep", "c", RES, {0: ["K"]}, None)
        store.insert("gone", "c", RES, {0: ["G"]}, None)
        store.delete(["gone"])
        store.prune_history(datetime.now(UTC) + timedelta(days=1))
    run_downgrade(ConnectOptions(path=str(db)), "0004")
    run_upgrade(ConnectOptions(path=str(db)), "head")
    conn = sqlite3.connect(db)
    (kept,) = conn.execute("SELECT hash FROM allocation_events WHERE seq = 1").fetchone()
    assert conn.execute("SELECT seq, prev_hash FROM history_chain_links").fetchall() == [(4, kept)]
    conn.close()
    with PodStore.open(db) as store:
        store.insert("next", "c", RES, {0: ["N"]}, None)
        assert [e.seq for e in store.history()] == [1, 4]
        assert store.verify_history().ok
    assert check_store(db) == []
