"""The allocation intervals the fleet keeps (revision f0009, ``fleet_intervals``), caught up
when read: after every catch-up, whatever the history brought (late ends, renamed pods, claims
changed or gone, replicas registered again, a snapshot), the kept rows are the rows
v_fleet_allocation_intervals computes from the whole history; nothing runs on ingest; one
catch-up at a time; readers may call it but never write the kept rows themselves."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from harness.fleetlib import as_role, connect, rows
from harness.nodegen import Node, pod_uid

from podstore import PodStore
from podstore.checkpoint import DRAState, PodName
from podstore.fleet import admin, db, migrate, read
from podstore.fleet.migrations.versions import f0009_kept_intervals as f0009
from podstore.fleet.ship import ship
from podstore.fleet.sql import ADVISORY_LOCK
from podstore.fleet.urls import resolve

GPU = "nvidia.com/gpu"
REP = "nvidia.com/gpu.shared"
# Replicas held before their resource was ever registered.
LATE = "example.com/late"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
# The view's columns but the node and the physical id, which the kept rows join at read.
SAME = (
    'store_id, mechanism, resource, device, pod_uid, container, start, "end", end_source, '
    "namespace, pod_name, share"
)
KEPT_LIVE = (
    f"SELECT {', '.join('i.' + c for c in SAME.split(', '))} FROM fleet_intervals i "
    "JOIN fleet_stores s ON s.store_id = i.store_id WHERE s.retired_at IS NULL"
)
VIEW = f"SELECT {SAME} FROM v_fleet_allocation_intervals"
KEPT_ALL = f"SELECT {f0009.COLUMNS} FROM fleet_intervals"
# Row identity: a row rewritten gets a new ctid and xmin.
KEPT_VERSIONS = "SELECT ctid, xmin, store_id, start_seq, pod_uid, device FROM fleet_intervals"


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="microseconds")[:-6] + "Z"


def _sorted(found: list[tuple[Any, ...]]) -> list[tuple[str, ...]]:
    return sorted(tuple(map(str, r)) for r in found)


def assert_kept(url: str) -> list[tuple[Any, ...]]:
    """Catch up, then: the live stores' kept rows are the view's (all columns but the node and
    the physical id), and every kept row is what the whole history computes."""
    read.catch_up(url)
    kept = rows(url, KEPT_LIVE)
    assert kept, "nothing kept: the comparison would be vacuous"
    assert _sorted(kept) == _sorted(rows(url, VIEW))
    live = "SELECT store_id FROM fleet_stores WHERE retired_at IS NULL"
    computed = f"SELECT * FROM ({f0009.ALL_ROWS}) x WHERE x.store_id IN ({live})"
    kept_all = f"SELECT * FROM ({KEPT_ALL}) k WHERE k.store_id IN ({live})"
    assert _sorted(rows(url, kept_all)) == _sorted(rows(url, computed))
    return kept


def _shares(url: str) -> dict[tuple[str, str], float]:
    return {
        (r[0], r[1]): r[2] for r in rows(url, "SELECT pod_uid, device, share FROM fleet_intervals")
    }


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    from podstore.storage import events

    now = [T0]
    monkeypatch.setattr(events, "utcnow", lambda: now[0])
    return now


def test_kept_intervals_follow_every_batch(
    tmp_path: Path, fleet_url: str, clock: list[datetime]
) -> None:
    node = Node(3)
    dra = node.dra()
    names = {f"p{i}": PodName(f"team-{i}", f"x{i}") for i in (1, 2)}
    names |= {f"r{i}": PodName("team-r", f"r{i}") for i in (1, 2, 3)}
    names["f1"] = PodName("team-r", "f1")
    names |= {pod_uid(i): PodName(*node.name_of(i)) for i in range(3)}
    gpus = ["G1", "G2", "G3", "G4"]
    with PodStore.open(tmp_path / "n.db") as store:

        def step(seconds: float) -> None:
            ship(store, fleet_url, node="node-1")
            assert_kept(fleet_url)
            clock[0] = T0 + timedelta(seconds=seconds)

        store.set_registered_devices({GPU: gpus, REP: ["R-0::0", "R-0::1"]})
        store.set_pod_names(names)
        store.set_dra_state(dra)
        store.insert("p1", "main", GPU, {0: ["G1"]}, b"")
        store.insert("p2", "main", GPU, {0: ["G2", "G3"]}, b"")
        store.insert("r1", "main", REP, {0: ["R-0::0"]}, b"")
        store.insert("f1", "main", LATE, {0: ["F-0::1"]}, b"")
        step(100)
        # One sync: a holding, then its resource registered again with more replicas (a higher
        # seq, the same time): the registration counts as in force at the holding's start.
        with store.transaction():
            store.insert("r2", "main", REP, {0: ["R-0::1"]}, b"")
            store.set_registered_devices({GPU: gpus, REP: [f"R-0::{k}" for k in range(4)]})
        step(200)
        # An end found late, for a holding shipped a batch before.
        assert store.record_ends([("p1", "main", "runtime", _at(40))]) == 1
        step(300)
        # Renamed: a device-plugin pod, and a pod that holds a DRA claim (its claim's rows
        # carry the name: no event of the claim says so).
        names["p2"] = PodName("team-moved", "x2")
        names[pod_uid(0)] = PodName("team-moved", "trainer-0")
        store.set_pod_names(names)
        # Registered after f1's holding began: none was in force, so its share is the
        # registered devices' now, and changes with them (no event of f1 says so).
        store.set_registered_devices(
            {GPU: gpus, REP: [f"R-0::{k}" for k in range(4)], LATE: ["F-0::0", "F-0::1"]}
        )
        step(400)
        # A claim gone, a pod's devices moved, a pod's whole-pod end, another pod gone; the
        # replicas registered again, eight now, and a new holding of one.
        store.set_dra_state(DRAState(dra.claims[1:]))
        store.insert("p2", "main", GPU, {0: ["G3"]}, b"")
        assert store.record_ends([(pod_uid(1), None, "pod-logs", _at(250))]) == 1
        store.delete(["p1"])
        store.set_registered_devices(
            {
                GPU: gpus,
                REP: [f"R-0::{k}" for k in range(8)],
                LATE: [f"F-0::{k}" for k in range(4)],
            }
        )
        store.insert("r3", "main", REP, {0: ["R-0::2"]}, b"")
        step(500)
        # A name gone: the interval keeps the last name its history gave.
        del names["p2"]
        store.set_pod_names(names)
        step(600)
    kept = {(r[4], r[1]): r for r in rows(fleet_url, KEPT_ALL)}
    assert {r[11] for k, r in kept.items() if k[0] == "p2"} == {"team-moved"}
    assert kept[(pod_uid(0), "dra")][11] == "team-moved"
    assert kept[(pod_uid(1), "dra")][10] == "pod-logs"
    assert kept[("p1", "device-plugin")][10] == "runtime"
    # Each replica holding keeps the share of the registration in force when it began.
    shares = _shares(fleet_url)
    assert shares["r1", "R-0::0"] == 0.5
    assert shares["r2", "R-0::1"] == 0.25
    assert shares["r3", "R-0::2"] == 0.125
    assert shares["f1", "F-0::1"] == 0.25
    assert {v for (pod, _), v in shares.items() if pod[0] not in "rf"} == {1.0}  # DRA whole
    usage = read.usage(fleet_url, by="namespace", since=_at(0), until=_at(600)).dicts()
    assert {r["namespace"] for r in usage} >= {"team-1", "team-moved", "team-r"}
    by_node = read.usage(fleet_url, by="node", since=_at(0), until=_at(600)).dicts()
    assert [r["node"] for r in by_node] == ["node-1"]
    assert sum(r["device_seconds"] for r in by_node) == pytest.approx(
        sum(r["device_seconds"] for r in usage)
    )


def test_kept_intervals_of_a_store_shipped_from_a_snapshot(
    tmp_path: Path, fleet_url: str, clock: list[datetime]
) -> None:
    # Pruned before it ever shipped: the names the snapshot brings are items, not events.
    with PodStore.open(tmp_path / "n.db") as store:
        store.set_pod_names({"p1": PodName("team-a", "x1"), "p2": PodName("team-b", "x2")})
        store.insert("p1", "main", GPU, {0: ["G1"]}, b"")
        store.insert("p2", "main", GPU, {0: ["G2"]}, b"")
        clock[0] = T0 + timedelta(seconds=100)
        store.insert("p2", "main", GPU, {0: ["G3"]}, b"")
        clock[0] = T0 + timedelta(seconds=200)
        assert store.prune_history(_at(150)) > 0
        store.insert("p3", "main", GPU, {0: ["G4"]}, b"")
        ship(store, fleet_url, node="node-1")
    assert rows(fleet_url, "SELECT count(*) FROM fleet_snapshots") == [(1,)]
    kept = assert_kept(fleet_url)
    assert {(r[4], r[9]) for r in kept} >= {("p2", "team-b"), ("p3", None)}


def _two_stores(tmp_path: Path, url: str) -> tuple[str, str]:
    ids = []
    for n in (1, 2):
        with PodStore.open(tmp_path / f"n{n}.db") as store:
            store.set_pod_names({f"p{n}": PodName(f"team-{n}", f"x{n}")})
            store.insert(f"p{n}", "main", GPU, {0: ["G1"]}, b"")
            store.insert(f"q{n}", "main", GPU, {0: ["G2"]}, b"")
            ship(store, url, node=f"node-{n}")
            ids.append(store.store_id)
    return ids[0], ids[1]


def test_a_catch_up_with_nothing_new_changes_nothing(tmp_path: Path, fleet_url: str) -> None:
    _two_stores(tmp_path, fleet_url)
    assert read.catch_up(fleet_url) == 6
    before = rows(fleet_url, KEPT_VERSIONS)
    marks = rows(fleet_url, "SELECT store_id, seq FROM fleet_intervals_marks ORDER BY 1")
    assert len(before) == 4 and [m[1] for m in marks] == [3, 3]
    # Nothing past the marks: no event taken in, no row rewritten, no mark moved.
    assert read.catch_up(fleet_url) == 0
    assert rows(fleet_url, KEPT_VERSIONS) == before
    assert rows(fleet_url, "SELECT store_id, seq FROM fleet_intervals_marks ORDER BY 1") == marks
    # One more event on one store: that store's mark moves on, and then nothing again.
    with PodStore.open(tmp_path / "n1.db") as store:
        store.insert("p1", "main", GPU, {0: ["G3"]}, b"")
        ship(store, fleet_url, node="node-1")
        one = store.store_id
    assert read.catch_up(fleet_url) == 1
    moved = rows(fleet_url, "SELECT store_id, seq FROM fleet_intervals_marks ORDER BY 1")
    assert {str(k): v for k, v in moved} == {str(k): 4 if str(k) == one else 3 for k, _ in marks}
    after = rows(fleet_url, KEPT_VERSIONS)
    assert len(after) == 5
    assert read.catch_up(fleet_url) == 0
    assert rows(fleet_url, KEPT_VERSIONS) == after
    assert_kept(fleet_url)


def test_a_retired_store_is_left_out(tmp_path: Path, fleet_url: str) -> None:
    _one, two = _two_stores(tmp_path, fleet_url)
    assert_kept(fleet_url)
    admin.retire(fleet_url, store_id=two)
    usage = read.usage(fleet_url, by="node", since=_at(-(10**8)), until=_at(10**8)).dicts()
    assert [r["node"] for r in usage] == ["node-1"]
    by_ns = read.usage(fleet_url, by="namespace", since=_at(-(10**8)), until=_at(10**8)).dicts()
    assert {r["namespace"] for r in by_ns} == {"team-1", None}
    assert_kept(fleet_url)


def test_shipping_runs_nothing_for_the_kept_intervals(tmp_path: Path, fleet_url: str) -> None:
    # No trigger on any shipped table: ingest pays nothing for the kept intervals.
    triggers = rows(
        fleet_url,
        "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "WHERE NOT t.tgisinternal AND c.relname LIKE 'fleet%'",
    )
    assert triggers == []
    _two_stores(tmp_path, fleet_url)
    assert rows(fleet_url, "SELECT count(*) FROM fleet_intervals") == [(0,)]
    assert rows(fleet_url, "SELECT count(*) FROM fleet_intervals_marks") == [(0,)]
    assert read.catch_up(fleet_url) == 6


def test_two_catch_ups_at_once_keep_each_interval_once(tmp_path: Path, fleet_url: str) -> None:
    _two_stores(tmp_path, fleet_url)
    found: list[int | BaseException] = []

    def run() -> None:
        try:
            found.append(read.catch_up(fleet_url))
        except BaseException as exc:  # handed to the test's thread
            found.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(found) == [0, 6]  # type: ignore[type-var]
    assert len(assert_kept(fleet_url)) == 4


WAITING = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


def test_a_catch_up_waits_for_the_one_running(tmp_path: Path, fleet_url: str) -> None:
    """This test holds the catch-up's lock as a running catch-up would: the second is seen
    waiting in pg_locks and has written nothing until the lock is let go."""
    _two_stores(tmp_path, fleet_url)
    found: list[int | BaseException] = []

    def waiting() -> None:
        try:
            found.append(read.catch_up(fleet_url))
        except BaseException as exc:  # handed to the test's thread
            found.append(exc)

    url = resolve(fleet_url)
    engine = sa.create_engine(url.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as watcher, engine.begin() as other:
            other.execute(sa.text(ADVISORY_LOCK), {"id": f0009.CATCH_UP_LOCK})
            run = threading.Thread(target=waiting)
            run.start()
            seen = False
            while run.is_alive() and not seen:
                seen = bool(watcher.execute(sa.text(WAITING)).scalar())
                watcher.rollback()  # a fresh snapshot of pg_locks each time
            assert seen, found
            count = "SELECT count(*) FROM fleet_intervals_marks"
            assert watcher.execute(sa.text(count)).scalar() == 0
            watcher.rollback()
        run.join(timeout=120)
    finally:
        engine.dispose()
        db.dispose_all()
    assert found == [6]


def test_a_reader_catches_up_but_writes_nothing_itself(tmp_path: Path, fleet_url: str) -> None:
    one, _two = _two_stores(tmp_path, fleet_url)
    admin.grant_reader(fleet_url, "kept_reader", login=True)
    reader = as_role(fleet_url, "kept_reader")
    import psycopg

    with connect(reader) as conn:
        assert conn.execute("SELECT fleet_intervals_catch_up()").fetchone() == (6,)
        conn.commit()

    for statement in (
        f"INSERT INTO fleet_intervals_marks (store_id, seq) VALUES ('{one}', 0)",
        "UPDATE fleet_intervals_marks SET seq = 0",
        "DELETE FROM fleet_intervals_marks",
        "UPDATE fleet_intervals SET share = 0",
        "DELETE FROM fleet_intervals",
        f"INSERT INTO fleet_intervals SELECT * FROM fleet_intervals WHERE store_id = '{one}'",
        "TRUNCATE fleet_intervals",
        f"SELECT fleet_intervals_refresh('{one}')",
    ):
        with connect(reader) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
    assert len(rows(fleet_url, "SELECT * FROM fleet_intervals")) == 4
    assert rows(fleet_url, "SELECT seq FROM fleet_intervals_marks") == [(3,), (3,)]


def test_the_upgrade_fills_the_intervals_from_the_history_held(
    tmp_path: Path, fleet_url: str, clock: list[datetime]
) -> None:
    names = {"p1": PodName("team-a", "x1")}
    with PodStore.open(tmp_path / "n.db") as store:
        store.set_pod_names(names)
        store.set_dra_state(Node(2).dra())
        store.insert("p1", "main", GPU, {0: ["G1"]}, b"")
        clock[0] = T0 + timedelta(seconds=100)
        assert store.record_ends([("p1", "main", "runtime", _at(40))]) == 1
        store.delete(["p1"])
        ship(store, fleet_url, node="node-1")
        admin.grant_reader(fleet_url, "kept_reader", login=True)
        before = _sorted(assert_kept(fleet_url))
        assert len(before) == 3
        migrate.downgrade(fleet_url, "f0008")
        assert rows(fleet_url, "SELECT to_regclass('fleet_intervals')") == [(None,)]
        migrate.upgrade(fleet_url)
        # Filled and marked: nothing left to catch up.
        assert rows(fleet_url, "SELECT count(*) FROM fleet_intervals_marks") == [(1,)]
        assert read.catch_up(fleet_url) == 0
        assert _sorted(assert_kept(fleet_url)) == before
    # The reader's rights are carried over: reading both tables, calling the catch-up.
    with connect(as_role(fleet_url, "kept_reader")) as conn:
        for relation in ("fleet_intervals", "v_fleet_allocation_intervals"):
            assert conn.execute(f"SELECT count(*) FROM {relation}").fetchone() == (3,)
        assert conn.execute("SELECT fleet_intervals_catch_up()").fetchone() == (0,)
