"""store.sync_checkpoint: pairs of checkpoint files (written with the Go-exact encoder) and the
exact events a sync from one to the other writes — every kind of change its own event and
nothing else, order-only rewrites nothing, bad files nothing at all."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.watch_support import (
    State,
    canonical_event,
    checkpoint_path,
    expected_events,
    file_state,
    mutate,
    normal,
    random_state,
    reordered,
    response_bytes,
    store_state,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from podstore import (
    CheckpointCorruptError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    ContainerAllocateResponse,
    PodDevicesEntry,
    PodStore,
    SyncReport,
    check_store,
    replay_history,
)


def resp(**envs: str) -> bytes:
    return ContainerAllocateResponse(envs=envs).SerializeToString(deterministic=True)


BASE = State(
    [
        PodDevicesEntry(
            "pod-a", "main", "example.com/gpu", {0: ["g0", "g1"], 1: ["g2"]}, resp(A="1", B="2")
        ),
        PodDevicesEntry("pod-a", "side", "example.com/nic", {-1: ["n0"]}, resp(N="0")),
        PodDevicesEntry("pod-b", "main", "example.com/gpu", {1: ["g3"]}, resp(A="3")),
    ],
    {"example.com/gpu": ["g0", "g1", "g2", "g3"], "example.com/nic": ["n0", "n1"]},
)


def dump(db: Path) -> dict[str, list[Any]]:
    """Every row of every table (events included), to prove a call changed nothing."""
    conn = sqlite3.connect(db)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
            )
        ]
        return {n: conn.execute(f'SELECT * FROM "{n}" ORDER BY 1').fetchall() for n in names}
    finally:
        conn.close()


def errors(store: PodStore) -> list[str]:
    """What ``podstore verify`` calls an error (a device listed twice is only a warning)."""
    return [str(f) for f in check_store(store.path) if f.severity == "error"]


def events_after(store: PodStore, seq: int) -> list[Any]:
    return normal([canonical_event(e) for e in store.history() if e.seq > seq])


def last_seq(store: PodStore) -> int:
    h = store.history()
    return h[-1].seq if h else 0


def sync_pair(store: PodStore, cp: Path, old: State, new: State) -> tuple[SyncReport, list[Any]]:
    old.write(cp)
    store.sync_checkpoint(cp)
    seq = last_seq(store)
    new.write(cp)
    report = store.sync_checkpoint(cp)
    return report, events_after(store, seq)


@pytest.fixture
def cp(tmp_path: Path) -> Path:
    return checkpoint_path(tmp_path)


def test_first_sync_inserts_every_entry_in_file_order(store: PodStore, cp: Path) -> None:
    BASE.write(cp)
    report = store.sync_checkpoint(cp)
    assert (report.inserted, report.replaced, report.deleted) == (3, 0, 0)
    assert (report.registered, report.unregistered, report.result) == (2, 0, "applied")
    assert report.entries == 3 and report.version == 2
    assert events_after(store, 0) == expected_events(None, BASE)
    assert [(e.pod_uid, e.container_name) for e in store.to_checkpoint_data()] == [
        ("pod-a", "main"),
        ("pod-a", "side"),
        ("pod-b", "main"),
    ]
    # The file round-trips byte for byte, as after an import.
    out = cp.parent / "out"
    store.export_checkpoint(out)
    assert out.read_bytes() == cp.read_bytes()


def test_identical_rewrite_is_unchanged(store: PodStore, cp: Path) -> None:
    report, events = sync_pair(store, cp, BASE, BASE)
    assert events == [] and report.result == "unchanged" and not report.changed
    assert report.events == 0


def test_order_only_rewrite_changes_nothing(store: PodStore, cp: Path, db_path: Path) -> None:
    """Entries, ID lists, registered lists and response map entries in another order: no
    event, no write, every entry where it was."""
    rng = random.Random(7)
    BASE.write(cp)
    store.sync_checkpoint(cp)
    before = dump(db_path)
    for _ in range(5):
        again = reordered(rng, BASE)
        assert again.data() != BASE.data()
        again.write(cp)
        report = store.sync_checkpoint(cp)
        assert report.result == "unchanged"
        assert dump(db_path) == before


def _with(state: State, i: int, **changes: Any) -> State:
    entries = list(state.entries or [])
    e = entries[i]
    fields = {
        "pod_uid": e.pod_uid,
        "container_name": e.container_name,
        "resource_name": e.resource_name,
        "device_ids": e.device_ids,
        "alloc_resp": e.alloc_resp,
    }
    fields.update(changes)
    entries[i] = PodDevicesEntry(**fields)
    return State(entries, state.registered)


def _registered(state: State, registered: Any) -> State:
    return State(state.entries, registered)


GPU = "example.com/gpu"
NIC = "example.com/nic"
# (name, the new state, the expected event ops)
CHANGES: list[tuple[str, Callable[[State], State], list[str]]] = [
    (
        "new entry of a known pod",
        lambda s: State(
            [*(s.entries or []), PodDevicesEntry("pod-b", "side", NIC, {0: ["n1"]}, resp())],
            s.registered,
        ),
        ["insert"],
    ),
    (
        "new pod",
        lambda s: State(
            [*(s.entries or []), PodDevicesEntry("pod-c", "m", GPU, {0: ["g9"]}, resp())],
            s.registered,
        ),
        ["insert"],
    ),
    (
        "entry dropped",
        lambda s: State((s.entries or [])[:1] + (s.entries or [])[2:], s.registered),
        ["delete"],
    ),
    (
        "last entry of a pod dropped",
        lambda s: State((s.entries or [])[:2], s.registered),
        ["delete"],
    ),
    (
        "device moved to another NUMA node",
        lambda s: _with(s, 2, device_ids={0: ["g3"]}),
        ["replace"],
    ),
    ("device added", lambda s: _with(s, 2, device_ids={1: ["g3", "g4"]}), ["replace"]),
    ("device listed twice", lambda s: _with(s, 2, device_ids={1: ["g3", "g3"]}), ["replace"]),
    ("null device map", lambda s: _with(s, 2, device_ids=None), ["replace"]),
    ("empty device map", lambda s: _with(s, 2, device_ids={}), ["replace"]),
    ("NUMA list empty", lambda s: _with(s, 2, device_ids={1: ["g3"], 0: []}), ["replace"]),
    ("NUMA list null", lambda s: _with(s, 2, device_ids={1: ["g3"], 0: None}), ["replace"]),
    ("env value changed", lambda s: _with(s, 2, alloc_resp=resp(A="4")), ["replace"]),
    ("env added", lambda s: _with(s, 2, alloc_resp=resp(A="3", B="1")), ["replace"]),
    (
        "mount added",
        lambda s: _with(
            s,
            2,
            alloc_resp=response_bytes(
                ContainerAllocateResponse(
                    envs={"A": "3"}, mounts=[{"container_path": "/m", "host_path": "/h"}]
                )
            ),
        ),
        ["replace"],
    ),
    ("AllocResp null", lambda s: _with(s, 1, alloc_resp=None), ["replace"]),
    (
        "same response, other map order",
        lambda s: _with(
            s,
            0,
            alloc_resp=response_bytes(
                ContainerAllocateResponse(envs={"A": "1", "B": "2"}), random.Random(3)
            ),
        ),
        [],
    ),
    (
        "resource registered",
        lambda s: _registered(s, {**(s.registered or {}), "x.io/r": ["r0"]}),
        ["registered"],
    ),
    (
        "resource unregistered",
        lambda s: _registered(s, {GPU: (s.registered or {})[GPU]}),
        ["unregistered"],
    ),
    (
        "registered device added",
        lambda s: _registered(s, {**(s.registered or {}), NIC: ["n0", "n1", "n2"]}),
        ["registered"],
    ),
    (
        "registered list null",
        lambda s: _registered(s, {**(s.registered or {}), NIC: None}),
        ["registered"],
    ),
    (
        "registered list empty",
        lambda s: _registered(s, {**(s.registered or {}), NIC: []}),
        ["registered"],
    ),
    (
        "registered list reordered",
        lambda s: _registered(s, {**(s.registered or {}), NIC: ["n1", "n0"]}),
        [],
    ),
    ("RegisteredDevices null", lambda s: _registered(s, None), ["unregistered", "unregistered"]),
    ("everything dropped", lambda s: State(None, s.registered), ["delete"] * 3),
]


@pytest.mark.parametrize(("name", "change", "ops"), CHANGES, ids=[c[0] for c in CHANGES])
def test_each_change_writes_exactly_its_events(
    store: PodStore, cp: Path, name: str, change: Callable[[State], State], ops: list[str]
) -> None:
    new = change(BASE)
    report, events = sync_pair(store, cp, BASE, new)
    assert [e[0] for e in events] == ops
    assert events == expected_events(BASE, new)
    assert report.events == len(ops)
    assert report.result == ("applied" if ops else "unchanged")
    assert store_state(store) == file_state(new)
    assert errors(store) == []


def test_unchanged_entries_keep_their_positions(store: PodStore, cp: Path) -> None:
    new = _with(BASE, 0, device_ids={0: ["g0"]})  # replace the first entry
    new = State(
        [PodDevicesEntry("pod-z", "m", GPU, {0: ["g7"]}, resp()), *(new.entries or [])],
        new.registered,
    )
    report, _ = sync_pair(store, cp, BASE, new)
    assert (report.replaced, report.inserted) == (1, 1)
    # The replaced entry kept its place; the new one, first in the file, went to the end.
    assert [(e.pod_uid, e.container_name) for e in store.to_checkpoint_data()] == [
        ("pod-a", "main"),
        ("pod-a", "side"),
        ("pod-b", "main"),
        ("pod-z", "m"),
    ]


def test_a_pod_that_loses_and_gains_entries_is_kept(store: PodStore, cp: Path) -> None:
    new = State(
        [*(BASE.entries or [])[:2], PodDevicesEntry("pod-b", "other", NIC, {0: ["n1"]}, resp())],
        BASE.registered,
    )
    _report, events = sync_pair(store, cp, BASE, new)
    assert [e[0] for e in events] == ["delete", "insert"]
    assert store.has_pod("pod-b") and errors(store) == []


def test_shape_of_empty_fields_is_kept_without_events(store: PodStore, cp: Path) -> None:
    empty = State([], {})
    report, events = sync_pair(store, cp, State(None, None), empty)
    assert events == [] and report.shape_changed and report.result == "applied"
    out = cp.parent / "out"
    store.export_checkpoint(out)
    assert out.read_bytes() == cp.read_bytes()
    report = store.sync_checkpoint(cp)
    assert report.result == "unchanged"


def test_duplicate_keys_fold_as_kubelet_restores_them(store: PodStore, cp: Path) -> None:
    first = PodDevicesEntry("pod-d", "m", GPU, {0: ["a"]}, resp())
    last = PodDevicesEntry("pod-d", "m", GPU, {0: ["b"]}, resp())
    other = PodDevicesEntry("pod-e", "m", GPU, {0: ["c"]}, resp())
    State([first, other, last], {}).write(cp)
    store.sync_checkpoint(cp)
    got = store.to_checkpoint_data()
    assert [(e.pod_uid, e.device_ids) for e in got] == [
        ("pod-d", {0: ["b"]}),
        ("pod-e", {0: ["c"]}),
    ]
    State([other, last], {}).write(cp)
    assert store.sync_checkpoint(cp).result == "unchanged"


def test_a_later_duplicate_that_does_not_decode_leaves_the_earlier_one(
    store: PodStore, cp: Path
) -> None:
    first = PodDevicesEntry("pod-d", "m", GPU, {0: ["a"]}, resp(A="1"))
    broken = PodDevicesEntry("pod-d", "m", GPU, {0: ["b"]}, b"\xff\xff")
    State([first, broken], {}).write(cp)
    report = store.sync_checkpoint(cp)
    assert [s.index for s in report.skipped] == [1]
    assert [(e.device_ids, e.alloc_resp) for e in store.to_checkpoint_data()] == [
        ({0: ["a"]}, resp(A="1"))
    ]


def test_an_entry_kubelet_would_skip_counts_as_absent(store: PodStore, cp: Path) -> None:
    BASE.write(cp)
    store.sync_checkpoint(cp)
    bad = _with(BASE, 2, alloc_resp=b"\xff\xff")
    bad.write(cp)
    report = store.sync_checkpoint(cp)
    assert report.deleted == 1 and len(report.skipped) == 1
    assert report.skipped[0].pod_uid == "pod-b"
    assert not store.has_pod("pod-b")


def test_entries_the_agent_inserted_without_a_response_are_replaced(
    store: PodStore, cp: Path
) -> None:
    BASE.write(cp)
    store.insert("pod-b", "main", GPU, {1: ["g3"]}, None)  # same devices, no response
    seq = last_seq(store)
    report = store.sync_checkpoint(cp)
    assert (report.inserted, report.replaced) == (2, 1)
    assert [e[0] for e in events_after(store, seq)] == [
        "registered",
        "registered",
        "replace",
        "insert",
        "insert",
    ]


BAD_FILES: dict[str, Callable[[bytes], bytes | None]] = {
    "missing": lambda data: None,
    "empty": lambda data: b"",
    "truncated": lambda data: data[: len(data) // 2],
    "checksum": lambda data: data.replace(b'"Checksum":', b'"Checksum":1'),
    "flipped byte": lambda data: data.replace(b"g3", b"g4"),
    "not JSON": lambda data: b"\x00garbage",
}
BAD_ERRORS = {
    "missing": CheckpointNotFoundError,
    "checksum": CheckpointCorruptError,
    "flipped byte": CheckpointCorruptError,
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_changes_nothing(store: PodStore, cp: Path, db_path: Path, kind: str) -> None:
    BASE.write(cp)
    store.sync_checkpoint(cp)
    before = dump(db_path)
    data = BAD_FILES[kind](mutate(random.Random(1), BASE).data())
    if data is None:
        cp.unlink()
    else:
        cp.write_bytes(data)
    with pytest.raises(BAD_ERRORS.get(kind, CheckpointFormatError)):
        store.sync_checkpoint(cp)
    assert dump(db_path) == before


def test_sync_ends_where_an_import_ends(tmp_path: Path, cp: Path) -> None:
    rng = random.Random(11)
    old = random_state(rng, 30)
    with PodStore.open(tmp_path / "a.db") as synced, PodStore.open(tmp_path / "b.db") as imported:
        old.write(cp)
        synced.sync_checkpoint(cp)
        for _ in range(5):
            new = mutate(rng, old, changes=6)
            new.write(cp)
            synced.sync_checkpoint(cp)
            imported.import_checkpoint(cp)
            assert store_state(synced) == store_state(imported) == file_state(new)
            assert replay_history(synced.history()).entries == {
                (e.pod_uid, e.container_name, e.resource_name): e.device_ids
                for e in synced.to_checkpoint_data()
            }
            old = new


@settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), pods=st.integers(0, 12), changes=st.integers(0, 8))
def test_random_pairs_write_exactly_the_reference_events(
    tmp_path_factory: pytest.TempPathFactory, seed: int, pods: int, changes: int
) -> None:
    rng = random.Random(seed)
    directory = tmp_path_factory.mktemp("pairs")
    cp = checkpoint_path(directory)
    old = random_state(rng, pods)
    new = mutate(rng, old, changes)
    with PodStore.open(directory / "store.db") as store:
        report, events = sync_pair(store, cp, old, new)
        assert events == expected_events(old, new)
        assert report.events == len(events)
        assert store_state(store) == file_state(new)
        # The history replays to the store's entries and registered devices.
        state = replay_history(store.history())
        assert {k: v for k, v in state.entries.items()} == {
            (e.pod_uid, e.container_name, e.resource_name): e.device_ids
            for e in store.to_checkpoint_data()
        }
        assert state.registered == {
            r: (None if ids is None else list(ids)) for r, ids in _stored_registered(store).items()
        }
        assert store.sync_checkpoint(cp).result == "unchanged"
        assert errors(store) == []


def _stored_registered(store: PodStore) -> dict[str, list[str] | None]:
    nulls = dict(store.query("SELECT resource, is_null FROM registered_resources").rows)
    return {r: None if nulls[r] else ids for r, ids in store.registered_devices().items()}


# ---- repeated syncs of one file (the state kept between them) ---------------------------------


def test_a_repeated_sync_still_diffs_against_the_store(store: PodStore, cp: Path) -> None:
    """Between two syncs of the same file another writer changes the store: the next sync
    puts the file's content back, though the file (and what the sync keeps of it) is the
    same."""
    BASE.write(cp)
    store.sync_checkpoint(cp)
    store.insert("pod-b", "main", GPU, {1: ["other"]}, resp(A="9"))
    store.delete(["pod-a"])
    store.insert("agent", "c", GPU, {0: ["x"]}, None)
    seq = last_seq(store)
    report = store.sync_checkpoint(cp)
    assert (report.replaced, report.inserted, report.deleted) == (1, 2, 1)
    assert [e[0] for e in events_after(store, seq)] == ["delete", "replace", "insert", "insert"]
    assert store_state(store) == file_state(BASE)


def test_a_rolled_back_sync_leaves_nothing_behind_for_the_next(store: PodStore, cp: Path) -> None:
    rng = random.Random(3)
    state = random_state(rng, 10)
    state.write(cp)
    store.sync_checkpoint(cp)
    newer = mutate(rng, state, 5)
    newer.write(cp)
    with pytest.raises(RuntimeError), store.transaction():
        store.sync_checkpoint(cp)
        raise RuntimeError("the caller's block fails after the sync")
    assert store_state(store) == file_state(state)
    report = store.sync_checkpoint(cp)
    assert report.events == len(expected_events(state, newer))
    assert store_state(store) == file_state(newer)


def test_syncs_from_two_threads_take_turns(db_path: Path, cp: Path) -> None:
    import threading

    rng = random.Random(4)
    states = [random_state(rng, 20)]
    for _ in range(6):
        states.append(mutate(rng, states[-1], 4))
    with PodStore.open(db_path) as store:
        for state in states:
            state.write(cp)
            results: list[Any] = []
            threads = [
                threading.Thread(target=lambda out=results: out.append(store.sync_checkpoint(cp)))
                for _ in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(results) == 2
            assert sorted(r.result for r in results)[-1] == "unchanged"
            assert store_state(store) == file_state(state)
        assert errors(store) == []


def test_an_undecodable_entry_is_skipped_on_every_sync(store: PodStore, cp: Path) -> None:
    bad = _with(BASE, 1, alloc_resp=b"\xff\xff")
    for _ in range(3):
        bad.write(cp)
        report = store.sync_checkpoint(cp)
        assert [s.pod_uid for s in report.skipped] == ["pod-a"]
        assert store.container_devices("pod-a", "side", NIC) is None
    BASE.write(cp)
    assert store.sync_checkpoint(cp).inserted == 1
    assert store_state(store) == file_state(BASE)
