"""The allocation history: which event each change writes, time handling, owners_at, pruning."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from harness.audit_fixture import at, build, clock

from podstore import (
    AllocationEvent,
    ContainerAllocateResponse,
    InvalidInputError,
    PodDevicesEntry,
    PodStore,
    ReadOnlyStoreError,
)
from podstore.checkpoint import dumps_checkpoint
from podstore.storage.entries import current_entries, current_registered
from podstore.storage.events import replay

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def ops(store: PodStore) -> list[tuple[str, str | None, str | None, str, object]]:
    return [
        (e.op, e.pod_uid, e.container_name, e.resource_name, e.device_ids) for e in store.history()
    ]


def assert_replay_matches(store: PodStore) -> None:
    state = replay(store.history())
    conn = sqlite3.connect(store.path)
    try:
        assert state.entries == current_entries(conn)
        assert state.registered == current_registered(conn)
    finally:
        conn.close()


def test_each_kind_of_change_writes_its_event(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a", "b"], -1: ["x"]}, None)
    store.insert("p", "c", "r", {1: ["b"]}, b"")  # over the existing entry
    store.insert("p", "c2", "r", None, None)  # a null map
    store.insert("q", "c", "r", {0: [], 1: None}, None)  # empty and null lists
    store.set_registered_devices({"r": ["a", "b"], "s": None})
    store.set_registered_devices({"r": ["a", "b"], "t": []})  # r unchanged: no event
    store.delete(["p", "nope"])
    assert ops(store) == [
        ("insert", "p", "c", "r", {-1: ["x"], 0: ["a", "b"]}),
        ("replace", "p", "c", "r", {1: ["b"]}),
        ("insert", "p", "c2", "r", None),
        ("insert", "q", "c", "r", {0: [], 1: None}),
        ("registered", None, None, "r", ["a", "b"]),
        ("registered", None, None, "s", None),
        ("unregistered", None, None, "s", None),
        ("registered", None, None, "t", []),
        ("delete", "p", "c", "r", {1: ["b"]}),
        ("delete", "p", "c2", "r", None),
    ]
    events = store.history()
    assert [e.seq for e in events] == list(range(1, 11))
    assert all(isinstance(e, AllocationEvent) for e in events)
    assert all(e.timestamp.tzinfo is not None and e.timestamp.utcoffset() == timedelta(0)
               for e in events)  # fmt: skip
    assert events[0].devices == {"a", "b", "x"}
    assert_replay_matches(store)


def test_stored_timestamps_are_utc_iso_with_microseconds_and_z(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a"]}, None)
    [(ts, text)] = store.query("SELECT ts, device_ids FROM allocation_events").rows
    assert TS.match(ts), ts
    assert text == '{"0":["a"]}'


def test_from_checkpoint_data_and_imports(store: PodStore, tmp_path: Path) -> None:
    resp = ContainerAllocateResponse(envs={"A": "1"}).SerializeToString()
    store.insert("old", "c", "r", {0: ["z"]}, None)
    store.insert("kept", "c", "r", {0: ["k"]}, None)
    store.from_checkpoint_data(
        [
            PodDevicesEntry("p", "c", "r", {0: ["a"]}, resp),
            PodDevicesEntry("bad", "c", "r", {0: ["b"]}, b"\xff\xff"),  # skipped: no event
        ]
    )
    assert ops(store)[-1] == ("import", "p", "c", "r", {0: ["a"]})
    assert len(ops(store)) == 3

    path = tmp_path / "cp"
    path.write_bytes(
        dumps_checkpoint(
            [
                PodDevicesEntry("kept", "c", "r", {0: ["k2"]}, resp),
                PodDevicesEntry("new", "c", "r", {-1: ["n"]}, resp),
            ],
            {"r": ["k2", "n"]},
        )
    )
    before = len(ops(store))
    store.import_checkpoint(path)  # replaces everything: drops old and p
    assert ops(store)[before:] == [
        ("delete", "old", "c", "r", {0: ["z"]}),
        ("delete", "p", "c", "r", {0: ["a"]}),
        ("registered", None, None, "r", ["k2", "n"]),
        ("import", "kept", "c", "r", {0: ["k2"]}),
        ("import", "new", "c", "r", {-1: ["n"]}),
    ]
    assert_replay_matches(store)

    store.import_checkpoint(path, merge=True)  # same again: entries rewritten, nothing dropped
    assert [o[0] for o in ops(store)[before + 5 :]] == ["import", "import"]
    assert_replay_matches(store)


def test_a_rolled_back_transaction_leaves_no_event(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a"]}, None)
    with pytest.raises(RuntimeError), store.transaction():
        store.insert("p", "c", "r", {0: ["b"]}, None)
        store.delete(["p"])
        store.set_registered_devices({"r": ["a"]})
        raise RuntimeError("roll back")
    with store.transaction():
        store.insert("q", "c", "r", {0: ["q"]}, None)
        with pytest.raises(InvalidInputError):
            store.insert("q", "c", "r", {0: [1]}, None)  # type: ignore[list-item]
    assert [o[:2] for o in ops(store)] == [("insert", "p"), ("insert", "q")]
    assert_replay_matches(store)


def test_the_log_is_append_only(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a"]}, None)
    conn = sqlite3.connect(store.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE allocation_events SET op = 'delete'")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE allocation_events SET op = 'nonsense'")
    finally:
        conn.close()


def test_time_never_runs_backwards_in_the_log(
    store: PodStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with clock(monkeypatch) as now:
        now[0] = at("10:00")
        store.insert("p", "c", "r", {0: ["a"]}, None)
        now[0] = at("09:00")  # the wall clock stepped back
        store.insert("q", "c", "r", {0: ["a"]}, None)
    a, b = store.history()
    assert b.timestamp == a.timestamp == at("10:00")
    assert b.seq > a.seq


def test_history_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with build(tmp_path / "node.db", monkeypatch) as store:
        assert [e.seq for e in store.history(pod_uid="pod-b")] == [3, 4]
        assert [e.seq for e in store.history(device_id="GPU-3")] == [3, 5, 11]
        assert [e.seq for e in store.history(since="2026-12-01T11:15Z", until="2026-12-01T12:20Z")
                ] == [6, 7, 8]  # fmt: skip
        # until is exclusive, since inclusive; naive datetimes are UTC; offsets are converted.
        assert [e.seq for e in store.history(since=datetime(2026, 12, 1, 12, 20))] == [
            9,
            10,
            11,
            12,
            13,
        ]
        plus_one = timezone(timedelta(hours=1))
        assert [
            e.seq for e in store.history(until=datetime(2026, 12, 1, 11, 10, tzinfo=plus_one))
        ] == [1, 2]  # 11:10+01:00 is 10:10 UTC
        assert len(store.history(since=date(2026, 12, 2))) == 0
        assert [e.op for e in store.history(pod_uid="pod-e", device_id="GPU-5")] == [
            "insert",
            "delete",
        ]
        assert store.history(pod_uid="nobody") == []


@pytest.mark.parametrize(
    "bad", ["yesterday", "2026-13-01", "", 1733011200, object(), b"2026-12-01"]
)
def test_bad_times_are_invalid_input(store: PodStore, bad: object) -> None:
    with pytest.raises(InvalidInputError):
        store.history(since=bad)
    with pytest.raises(InvalidInputError):
        store.owners_at("a", bad)
    with pytest.raises(InvalidInputError):
        store.prune_history(before=bad)
    with pytest.raises(InvalidInputError):
        store.history(pod_uid=5)  # type: ignore[arg-type]


def test_owners_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with build(tmp_path / "node.db", monkeypatch) as store:
        gpu = "nvidia.com/gpu"
        assert store.owners_at("GPU-3", "2026-12-01T10:29Z") == []
        assert store.owners_at("GPU-3", at("10:30")) == [("pod-b", "worker", gpu)]
        assert store.owners_at("GPU-3", "2026-12-01T11:00:00Z") == [("pod-b", "worker", gpu)]
        assert store.owners_at("GPU-3", "2026-12-01T11:10:00+00:00") == [
            ("pod-b", "worker", gpu),
            ("pod-c", "rogue", gpu),
        ]
        assert store.owners_at("GPU-5", "2026-12-01T12:00Z") == [("pod-e", "job", gpu)]
        assert store.owners_at("GPU-5", "2026-12-01T12:20Z") == []  # deleted at 12:20
        # The replace at 12:30 kept GPU-1 on the same entry; GPU-4 is shared inside pod-d.
        assert store.owners_at("GPU-1", "2026-12-01T13:00Z") == [("pod-a", "trainer", gpu)]
        assert store.owners_at("GPU-4", "2030-01-01") == [
            ("pod-d", "init", gpu),
            ("pod-d", "main", gpu),
        ]
        # Registered-device events are not holders.
        assert store.owners_at("GPU-6", "2030-01-01") == []
        assert store.owners_at("nothing", "2030-01-01") == []


def test_owners_at_follows_a_device_moving_between_entries(
    store: PodStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with clock(monkeypatch) as now:
        now[0] = at("10:00")
        store.insert("p", "c", "r", {0: ["g"]}, None)
        now[0] = at("10:10")
        store.insert("p", "c", "r", {0: ["h"]}, None)  # the replace no longer lists g
        now[0] = at("10:20")
        store.insert("q", "c", "r", {1: ["g"]}, None)
    assert store.owners_at("g", at("10:05")) == [("p", "c", "r")]
    assert store.owners_at("g", at("10:15")) == []
    assert store.owners_at("g", at("10:25")) == [("q", "c", "r")]
    assert store.owners_at("h", at("10:25")) == [("p", "c", "r")]


def test_prune_keeps_the_state_at_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with build(tmp_path / "node.db", monkeypatch) as store:
        before = store.history()
        removed = store.prune_history(before="2026-12-01T12:25:00Z")
        kept = store.history()
        assert removed == len(before) - len(kept)
        # pod-a's nvidia entry: only its latest pre-cut event (10:05) survives — the 12:30
        # replace is after the cut and stays too. pod-e: inserted then deleted before the cut,
        # so both go. Everything else: its only event is still the state at the cut.
        assert [(e.seq, e.op, e.pod_uid) for e in kept] == [
            (1, "insert", "pod-a"),
            (2, "insert", "pod-a"),
            (3, "insert", "pod-b"),
            (4, "insert", "pod-b"),
            (5, "insert", "pod-c"),
            (6, "insert", "pod-d"),
            (7, "insert", "pod-d"),
            (10, "replace", "pod-a"),
            (11, "registered", None),
            (12, "registered", None),
            (13, "registered", None),
        ]
        assert_replay_matches(store)
        # Exact from the cut on.
        assert store.owners_at("GPU-3", at("12:25")) == [
            ("pod-b", "worker", "nvidia.com/gpu"),
            ("pod-c", "rogue", "nvidia.com/gpu"),
        ]
        assert store.owners_at("GPU-5", at("12:25")) == []
        # Pruning again at the same cut removes nothing; pruning everything keeps the state.
        assert store.prune_history(before="2026-12-01T12:25:00Z") == 0
        # Now only pod-a's 10:05 insert is superseded (by the 12:30 replace).
        assert store.prune_history(before=datetime(2100, 1, 1, tzinfo=UTC)) == 1
        assert_replay_matches(store)
        assert len(store.history()) == 10
        # A new event after pruning the newest rows gets a fresh seq, never a reused one.
        store.delete(["pod-c"])
        assert store.history()[-1].seq == 14


def test_prune_after_deleting_everything_leaves_an_empty_log(store: PodStore) -> None:
    store.insert("p", "c", "r", {0: ["a"]}, None)
    store.set_registered_devices({"r": ["a"]})
    store.delete(["p"])
    store.set_registered_devices({})
    assert store.prune_history(before="2100-01-01") == 4
    assert store.history() == []
    assert store.query("SELECT count(*) FROM allocation_event_devices").rows == [(0,)]
    store.insert("p", "c", "r", {0: ["a"]}, None)
    assert store.history()[0].seq == 5


def test_history_on_a_read_only_store_and_prune_refused(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", "r", {0: ["a"]}, None)
    with PodStore.open(db_path, readonly=True) as ro:
        assert [e.op for e in ro.history()] == ["insert"]
        assert ro.owners_at("a", "2100-01-01") == [("p", "c", "r")]
        with pytest.raises(ReadOnlyStoreError):
            ro.prune_history(before="2100-01-01")


def test_device_ids_with_nul_and_non_ascii_round_trip(store: PodStore) -> None:
    odd = "gpu\x00ü"
    store.insert("p", "c", "r", {0: [odd, "plain"]}, None)
    store.set_registered_devices({"r": [odd]})
    assert [e.op for e in store.history(device_id=odd)] == ["insert", "registered"]
    assert store.history()[0].device_ids == {0: [odd, "plain"]}
    assert store.owners_at(odd, "2100-01-01") == [("p", "c", "r")]
    assert_replay_matches(store)
