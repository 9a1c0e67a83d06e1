"""A hostile node role against the record (issue "fleet round 3"): each attack is made as the
attacking role (trust authentication over the test server's socket, or a real ``ship``), and
the server refuses it; the shipping functions re-check everything per call (issue "tests with
teeth")."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness.audit_fixture import at, clock
from harness.fleetlib import (
    as_role,
    assert_same_state,
    chained,
    connect,
    entry_rows,
    fleet_event_seqs,
    rows,
    send_batch,
    wire,
)

from podstore import FleetRefusedError, PodStore
from podstore.fleet import admin, read
from podstore.fleet.migrations.versions.f0005_hostile_node import STORES_PER_NODE
from podstore.fleet.ship import ship
from podstore.pure import chain


def _store_row(url: str, sid: str) -> tuple[object, ...]:
    (row,) = rows(
        url,
        "SELECT node, last_seq, head_hash, refusals, last_refusal FROM fleet_stores "
        "WHERE store_id = CAST(:s AS uuid)",
        {"s": sid},
    )
    return row


def _verify_ok(url: str) -> None:
    assert all(r["problem"] is None for r in read.verify(url).dicts())


# ---- 1. a pruned clone, a restored backup -------------------------------------------------


def _run_on(store: PodStore, pods: list[str], hour: str, now: list[object]) -> None:
    now[0] = at(hour)
    for pod in pods:
        store.insert(pod, "c", "gpu", {0: [f"G-{pod}"]}, None)
        store.delete([pod])


def test_a_pruned_clone_cannot_take_the_store_over(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: a copy of the store (a cloned disk, or a backup restored later) runs
    on, prunes its history and ships while the genuine store shipped past the copy point: the
    snapshot cannot show it continues the fleet's chain and is refused; the genuine store
    keeps shipping."""
    orig_db, clone_db = tmp_path / "orig.db", tmp_path / "clone.db"
    with clock(monkeypatch) as now:
        with PodStore.open(orig_db) as orig:
            now[0] = at("09:00")
            orig.insert("keep", "c", "gpu", {0: ["G0"]}, None)
            ship(orig, fleet_url, node="node-a")
        shutil.copy(orig_db, clone_db)
        with PodStore.open(orig_db) as orig:
            _run_on(orig, ["o1", "o2"], "10:00", now)
            ship(orig, fleet_url, node="node-a")  # the fleet holds seqs the clone never had
            sid = orig.store_id
        held = fleet_event_seqs(fleet_url, sid)
        before = _store_row(fleet_url, sid)
        with PodStore.open(clone_db) as clone:
            _run_on(clone, ["c1", "c2", "c3", "c4"], "11:00", now)
            now[0] = at("12:00")
            assert clone.prune_history(at("12:00")) > 0
            with pytest.raises(FleetRefusedError) as info:
                ship(clone, fleet_url, node="node-a")
    assert info.value.reason == "diverged"
    assert "nothing proves that its history continues" in str(info.value)
    assert "podstore reset-identity" in str(info.value)
    # Nothing of the clone was written: only the refusal was counted.
    assert fleet_event_seqs(fleet_url, sid) == held
    after = _store_row(fleet_url, sid)
    assert after[:3] == before[:3] and after[3] == before[3] + 1  # type: ignore[operator]
    assert rows(fleet_url, "SELECT count(*) FROM fleet_snapshots") == [(0,)]
    # The genuine store ships on.
    with clock(monkeypatch) as now, PodStore.open(orig_db) as orig:
        _run_on(orig, ["o3"], "13:00", now)
        assert ship(orig, fleet_url, node="node-a").shipped == 2
        assert_same_state(fleet_url, orig)
    _verify_ok(fleet_url)


def test_a_gap_after_the_first_missing_event_is_healed(
    tmp_path: Path, fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that kept the first event the fleet lacks proves it continues the chain: the
    gap after it is healed by a snapshot, as before."""
    with PodStore.open(tmp_path / "n.db") as store, clock(monkeypatch) as now:
        now[0] = at("09:00")
        store.insert("p0", "c", "gpu", {0: ["G0"]}, None)  # seq 1
        ship(store, fleet_url, node="n")
        now[0] = at("10:00")
        store.insert("p1", "c", "gpu", {0: ["G1"]}, None)  # seq 2: live, kept
        store.insert("p5", "c", "gpu", {0: ["G5"]}, None)  # seq 3: pruned
        store.delete(["p5"])  # seq 4: pruned
        now[0] = at("12:00")
        store.insert("p2", "c", "gpu", {0: ["G2"]}, None)  # seq 5
        assert store.prune_history(at("11:00")) == 2
        report = ship(store, fleet_url, node="n")
        assert (report.snapshots, report.missing, report.shipped) == (1, 2, 2)
        assert_same_state(fleet_url, store)
    _verify_ok(fleet_url)


# ---- 4. another node's store ---------------------------------------------------------------


def test_another_nodes_store_is_neither_told_written_nor_locked(fleet_url: str) -> None:
    sid_b = str(uuid.uuid4())
    events, _ = chained(sid_b, entry_rows(1, 5))
    with connect(fleet_url) as owner:
        assert send_batch(owner, sid_b, "node-b", events, chain.genesis(sid_b)) == (5, None)
    before = _store_row(fleet_url, sid_b)
    role_a = admin.grant_node(fleet_url, "node-a").role
    with connect(as_role(fleet_url, role_a)) as a:
        last, head, refused = a.execute(
            "SELECT * FROM fleet_ship_open(%s, %s)", (sid_b, "node-a")
        ).fetchone()
        assert (last, head) == (None, None)
        assert "another node, node-b" in refused
        # The batch function on its own refuses alike, and tells nothing either.
        shipped, refused = a.execute(
            "SELECT * FROM fleet_ship_batch(%s, %s, %s, %s, %s, %s)",
            (sid_b, "node-a", 10, bytes(32), *wire([])),
        ).fetchone()
        assert shipped == 0 and "another node, node-b" in refused
        # Its transaction still open: node b's own ship does not wait for it.
        with connect(fleet_url) as b:
            b.execute("SET lock_timeout = '2s'")
            more, _ = chained(sid_b, entry_rows(6, 3), prev=bytes.fromhex(events[-1]["hash"]))
            assert send_batch(b, sid_b, "node-b", more, bytes.fromhex(events[-1]["hash"])) == (
                3,
                None,
            )
        a.commit()
    after = _store_row(fleet_url, sid_b)
    assert after[0] == "node-b" and after[1] == 8 and after[3:] == before[3:]  # not counted


# ---- 5. inventory and values ----------------------------------------------------------------


def test_a_node_role_cannot_flood_the_inventory(fleet_url: str) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    url = as_role(fleet_url, role)
    with connect(url) as a:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="stores in service"):
            a.execute(
                "SELECT count(*) FROM (SELECT fleet_ship_open(gen_random_uuid(), 'node-a') "
                "FROM generate_series(1, 1000)) AS x"
            )
        a.rollback()
    assert rows(fleet_url, "SELECT count(*) FROM fleet_stores") == [(0,)]
    with connect(url) as a:
        for _ in range(STORES_PER_NODE):
            a.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), 'node-a')")
        a.commit()
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            a.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), 'node-a')")
        a.rollback()
    # Retiring stores makes room; the owner is not bounded.
    admin.retire(fleet_url, node="node-a")
    admin.grant_node(fleet_url, "node-a")
    with connect(url) as a:
        a.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), 'node-a')")
        a.commit()
    with (
        connect(fleet_url) as owner,
        pytest.raises(psycopg.errors.InvalidParameterValue, match="253"),
    ):
        owner.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), %s)", ("n" * 300,))


@pytest.mark.parametrize("ts", ["infinity", "-infinity", "10000-01-01T00:00:00Z", "1969-12-31"])
def test_times_python_cannot_read_back_are_refused(fleet_url: str, ts: str) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    sid = str(uuid.uuid4())
    row = (1, ts, "insert", "p", "c", "gpu", '{"0":["G"]}', None)
    with connect(as_role(fleet_url, role)) as a:
        # Hashed as the server hashes it (the byte rule is public): only the range stops it.
        (value,) = a.execute(
            "SELECT sha256(fleet_chain_genesis(%s) || fleet_event_canonical("
            "%s, %s, %s, %s, %s, %s, %s, %s))",
            (sid, *row),
        ).fetchone()
        names = ("seq", "ts", "op", "pod_uid", "container", "resource", "device_ids", "released")
        events = [{**dict(zip(names, row, strict=True)), "hash": value.hex()}]
        with pytest.raises(psycopg.errors.CheckViolation, match="ck_fleet_events_ts"):
            send_batch(a, sid, "node-a", events, chain.genesis(sid))
    assert rows(fleet_url, "SELECT count(*) FROM fleet_events") == [(0,)]
    # `fleet sql` reads every time the fleet holds.
    assert read.query(fleet_url, "SELECT * FROM fleet_events").rows == []


def test_the_shipping_functions_wait_a_bounded_time_for_a_lock(fleet_url: str) -> None:
    # Set on the functions, so a caller cannot lift it with its own SET.
    assert rows(
        fleet_url,
        "SELECT proname, proconfig @> ARRAY['lock_timeout=1min'] FROM pg_proc "
        "WHERE proname IN ('fleet_ship_open', 'fleet_ship_batch', 'fleet_ship_snapshot') "
        "ORDER BY 1",
    ) == [("fleet_ship_batch", True), ("fleet_ship_open", True), ("fleet_ship_snapshot", True)]


# ---- per-call re-checks of the batch and snapshot functions ---------------------------------


def test_the_batch_function_rechecks_node_retirement_and_the_nodes_newest_seq(
    fleet_url: str,
) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    url = as_role(fleet_url, role)
    sid = str(uuid.uuid4())
    events, head = chained(sid, entry_rows(1, 6))
    with connect(url) as a:
        assert send_batch(a, sid, "node-a", events[:3], chain.genesis(sid)) == (3, None)
        # A batch past the node's own newest seq (it says it has 4 events, sends up to 6).
        with pytest.raises(psycopg.ProgrammingError, match="without a hole"):
            a.execute(
                "SELECT * FROM fleet_ship_batch(%s, %s, %s, %s, %s, %s)",
                (sid, "node-a", 4, bytes.fromhex(events[2]["hash"]), *wire(events[3:])),
            )
        a.rollback()
    assert fleet_event_seqs(fleet_url, sid) == [1, 2, 3]
    # Retired between the open and the batch: the batch itself refuses, writing nothing.
    admin.retire(fleet_url, store_id=sid)
    with connect(fleet_url) as owner:
        shipped, refused = owner.execute(
            "SELECT * FROM fleet_ship_batch(%s, %s, %s, %s, %s, %s)",
            (sid, "node-a", 6, bytes.fromhex(events[2]["hash"]), *wire(events[3:])),
        ).fetchone()
        owner.commit()
    assert shipped == 0 and "was retired" in refused
    assert fleet_event_seqs(fleet_url, sid) == [1, 2, 3]
    # Another node's name on this store, called without fleet_ship_open first.
    with connect(fleet_url) as owner:
        shipped, refused = owner.execute(
            "SELECT * FROM fleet_ship_batch(%s, %s, %s, %s, %s, %s)",
            (sid, "node-z", 6, bytes.fromhex(events[2]["hash"]), *wire(events[3:])),
        ).fetchone()
        owner.commit()
    assert shipped == 0 and "another node, node-a" in refused
    assert fleet_event_seqs(fleet_url, sid) == [1, 2, 3] and head


def _snapshot(conn: Any, sid: str, at_seq: int, head: bytes, kept: list[Any]) -> Any:
    return conn.execute(
        "SELECT * FROM fleet_ship_snapshot(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (sid, "node-a", at_seq, "2026-12-04T12:00:00Z", head, "[]", "[]", *wire(kept), "[]", "[]"),
    ).fetchone()


def test_the_snapshot_function_checks_the_head_against_the_kept_event(fleet_url: str) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    sid = str(uuid.uuid4())
    events, head = chained(sid, entry_rows(1, 4))
    with connect(as_role(fleet_url, role)) as a:
        assert send_batch(a, sid, "node-a", events[:2], chain.genesis(sid)) == (2, None)
        # Kept seqs 3 and 4 (4 is the snapshot's seq), but a head that is not seq 4's hash.
        with pytest.raises(psycopg.ProgrammingError, match="not that event's hash"):
            _snapshot(a, sid, 4, bytes(32), events[2:])
        a.rollback()
        # No kept event at all: nothing shows the store continues the fleet's chain.
        assert "nothing proves" in _snapshot(a, sid, 9, head, [])[2]
        a.commit()
        assert _snapshot(a, sid, 4, head, events[2:])[:2] == (2, 0)
        a.commit()
    assert fleet_event_seqs(fleet_url, sid) == [1, 2, 3, 4]
    _verify_ok(fleet_url)


# ---- fleet verify and the alignment view: each rule both ways ---------------------------


def test_fleet_verify_compares_the_devices_column_both_ways(fleet_url: str) -> None:
    sid = str(uuid.uuid4())
    events, _ = chained(sid, entry_rows(1, 3))
    with connect(fleet_url) as owner:
        assert send_batch(owner, sid, "n", events, chain.genesis(sid)) == (3, None)
    _verify_ok(fleet_url)
    ((held,),) = rows(
        fleet_url,
        "SELECT devices FROM fleet_events WHERE store_id = CAST(:s AS uuid) AND seq = 2",
        {"s": sid},
    )
    assert len(held) == 2
    for edit in (
        "devices = devices || ARRAY['GPU-extra']",  # one more than the text names
        "devices = devices[2:]",  # one fewer
        "devices = ARRAY[devices[1], devices[1]] || devices[3:]",  # one swapped for a repeat
    ):
        with connect(fleet_url) as owner:
            owner.execute(f"UPDATE fleet_events SET {edit} WHERE store_id = %s AND seq = 2", (sid,))
            owner.commit()
            (problem,) = [r["problem"] for r in read.verify(fleet_url).dicts()]
            assert problem is not None and "devices column differs" in problem, edit
            owner.execute(
                "UPDATE fleet_events SET devices = %s WHERE store_id = %s AND seq = 2",
                (held, sid),
            )
            owner.commit()
    _verify_ok(fleet_url)


def _aligned(url: str, memory_numa: list[int], cpus: list[int], device_numa: int | None) -> Any:
    sid = str(uuid.uuid4())
    items = [
        ("node", None, None, "numa:0", "[0, 1]"),
        ("node", None, None, "numa:1", "[2, 3]"),
        ("cpu", "p", "c", "cpu", str(cpus)),
        ("memory", "p", "c", "memory", f'[{{"numaAffinity": {memory_numa}}}]'),
    ]
    with connect(url) as owner:
        owner.execute("INSERT INTO fleet_stores (store_id, node) VALUES (%s, 'n')", (sid,))
        for kind, pod, container, resource, value in items:
            owner.execute(
                "INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, "
                "resource, value, seq) VALUES (%s, CAST(jsonb_build_array("
                "CAST(%s AS text), CAST(%s AS text), CAST(%s AS text)) AS text), %s, %s, %s, "
                "%s, CAST(%s AS jsonb), 1)",
                (sid, pod, container, resource, kind, pod, container, resource, value),
            )
        if device_numa is not None:
            owner.execute(
                "INSERT INTO fleet_allocations (store_id, pod_uid, container, resource, seq, "
                "numa_node, position, device_id) VALUES (%s, 'p', 'c', 'gpu', 1, %s, 0, 'G')",
                (sid, device_numa),
            )
        owner.commit()
    (row,) = read.query(
        url,
        "SELECT device_numa, cpu_numa, memory_numa, aligned FROM v_fleet_container_numa "
        "WHERE store_id = CAST(:s AS uuid)",
        {"s": sid},
    ).rows
    return row


def test_the_alignment_view_counts_memory(fleet_url: str) -> None:
    # CPUs and devices on node 0; memory on node 1: misaligned, whatever else agrees.
    assert _aligned(fleet_url, [1], [0, 1], 0) == ([0], [0], [1], 0)
    assert _aligned(fleet_url, [1], [0, 1], None) == (None, [0], [1], 0)
    assert _aligned(fleet_url, [0], [0], 0) == ([0], [0], [0], 1)
    assert _aligned(fleet_url, [0, 1], [0, 2], 0)[3] == 0  # devices on 0 only
    listed = read.query(fleet_url, "SELECT count(*) FROM v_fleet_numa_misaligned").rows
    assert listed == [(3,)]
