"""A sync that knows which items a rewrite changed (storage/node/delta.py), and the CPU file's
cheap read (storage/node/incremental_cpu.py: members read in the older copy, ``data`` checked
by escaping, the items' count and empty pods from the last read's summary).

Every read is checked against a fresh full read of the same bytes (tests/test_node_incremental
``Reader``: the same PreparedNode, items in the same order, or the same error), and every store
fed so against one fed by full reads: the same tables and the same history, event by event.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fnv_hash_fast import fnv1a_32
from test_node_incremental import (
    PODS,
    Reader,
    _rewrites,
    base,
    data_of,
    member_span,
    with_data,
)

from bench.nodefiles import _uid, cpu_state
from podstore import PodStore
from podstore.checkpoint import (
    CPUManagerState,
)
from podstore.storage.node import cpu
from podstore.storage.node import sync as node_sync
from podstore.storage.node.delta import Delta
from podstore.storage.node.items import LazyItems

KINDS = ("cpu", "memory", "dra")


def _history(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT seq, op, pod_uid, container, resource, device_ids, released "
            "FROM allocation_events ORDER BY seq"
        ).fetchall()


@pytest.mark.parametrize("kind", KINDS)
def test_reads_know_which_keys_changed_and_read_as_full_reads(kind: str, tmp_path: Path) -> None:
    reader = Reader(kind, tmp_path / kind)
    files = _rewrites(kind, random.Random(f"delta-{kind}"), 60)
    known = 0
    for data in files:
        got, fast = reader.read(data)  # the full read's items, in its order (built on demand)
        assert got[0] == "ok" and fast
        prepared: node_sync.PreparedNode = got[1]
        assert prepared.delta is not None
        if prepared.delta.keys is not None:
            known += 1
            # Every key outside the delta holds the item the read before gave it.
            assert set(prepared.delta.items) <= set(prepared.delta.keys)
            for key in prepared.delta.items:
                assert prepared.items[key] == prepared.delta.items[key]
    assert known == len(files) - 1  # all but the first read
    if kind == "cpu":
        assert reader.state.last.unescaped == 0  # every file read in its copy


@pytest.mark.parametrize("kind", KINDS)
def test_syncs_from_the_delta_write_what_full_syncs_write(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / kind
    cached_db, full_db = tmp_path / "cached.db", tmp_path / "full.db"
    files = _rewrites(kind, random.Random(f"delta-store-{kind}"), 40)
    # Each apply_items call of the cached store: whether it had a delta (a fall back to
    # comparing every key is a second call, without one).
    calls: list[bool] = []
    apply_items = node_sync.apply_items

    def counted(*args: Any) -> tuple[int, int]:
        calls.append(len(args) > 4 and args[4] is not None)
        return apply_items(*args)

    with PodStore.open(cached_db) as cached, PodStore.open(full_db) as full:
        for n, data in enumerate(files):
            path.write_bytes(data)
            calls.clear()
            with monkeypatch.context() as m:
                m.setattr(node_sync, "apply_items", counted)
                got = cached.import_node_checkpoint(path, kind=kind)
            # Every sync but the first takes the delta, and trusts it: one call.
            assert calls == [n > 0]
            prepared = node_sync.prepare(path, kind)
            with full._sessions.write() as conn:
                want = node_sync.apply(conn, prepared)
            assert got == want
        read_state = cached._node_states[(kind, str(path))]
        assert read_state.fast == len(files) and read_state.last.generation is not None
        with cached._sessions.snapshot() as c1, full._sessions.snapshot() as c2:
            assert node_sync.current_items(c1) == node_sync.current_items(c2)
    assert _history(cached_db) == _history(full_db)
    assert len(_history(full_db)) > len(files)


def test_a_cpu_sync_from_its_summary_builds_no_items(tmp_path: Path) -> None:
    """A one-change rewrite's items are counted from the last read's summary, not built; what
    builds them on demand is the full read's dict, in its order."""
    reader = Reader("cpu", tmp_path / "cpu")
    a, b = base("cpu")
    reader.read(a)
    reader.path.write_bytes(b)
    prepared = node_sync.prepare(reader.path, "cpu", state=reader.state)
    assert isinstance(prepared.items, LazyItems) and prepared.items._items is None
    assert len(prepared.items) == len(node_sync.prepare(reader.path, "cpu").items)
    assert prepared.items._items is None
    assert list(prepared.items.items()) == list(node_sync.prepare(reader.path, "cpu").items.items())


# -- the CPU file's copy and its data string ----------------------------------------------------


def _pod_changed(data: str, pod: int) -> str:
    """``data`` with pod ``pod``'s main container's CPUs changed inside the member, the text
    as long as before (``4-5`` → ``4,5``)."""
    start, end = member_span(data, _uid(pod))
    member = data[start:end]
    cut = member.index('"main":"')
    changed = member[:cut] + member[cut:].replace("-", ",", 1)
    assert changed != member and len(changed) == len(member)
    return data[:start] + changed + data[end:]


def _file(copy: str, data_text: str, *, fnv_of: str | None = None) -> bytes:
    """A CPU v4 file: ``copy`` (without its braces), ``data_text`` already as a JSON string."""
    fnv = fnv1a_32(b"(string)" + (json.loads(data_text) if fnv_of is None else fnv_of).encode())
    return f'{{{copy},"checksum":0,"data":{data_text},"dataChecksum":{fnv}}}'.encode()


def copy_variations() -> list[tuple[str, bytes, bool, bool]]:
    """(what, file, whether the fast path must take it, whether it reads the copy) after the
    base file was read: copies and data strings that agree or disagree only in ways the
    escaped check must see."""
    a, _ = base("cpu")
    data = data_of(a)
    copy = data[1:-1]
    inner = _pod_changed(data, 3)  # a member in the middle of a run of the last file's
    spaced = data.replace(f'"{_uid(3)}":{{', f'"{_uid(3)}":{{\n', 1)
    keyed = data.replace(f'"{_uid(2)}"', '"\\u0030' + _uid(2)[1:] + '"', 1)
    fresh = _pod_changed(data, 0)  # a member the last file did not have
    return [
        ("as kubelet writes it", a, True, True),
        ("data changed inside a run, copy not", with_data("cpu", inner, copy=copy), False, False),
        # The checksum over the copy's text: only the escaped check tells them apart.
        (
            "data changed inside a run, checksum of the copy",
            _file(copy, json.dumps(inner), fnv_of=data),
            False,
            False,
        ),
        (
            "data changed in a new member, checksum of the copy",
            _file(fresh[1:-1], json.dumps(data), fnv_of=fresh),
            False,
            False,
        ),
        (
            "copy changed inside a run, data not",
            with_data("cpu", data, copy=inner[1:-1]),
            False,
            False,
        ),
        (
            "a raw newline in the data string",
            _file(spaced[1:-1], json.dumps(spaced).replace("\\n", "\n"), fnv_of=spaced),
            False,
            False,
        ),
        ("a newline between tokens, escaped in data", with_data("cpu", spaced), True, False),
        ("a backslash in a key", with_data("cpu", keyed), True, True),
        (
            "a quote escaped as \\u0022 in data",
            _file(copy, json.dumps(data).replace('\\"', "\\u0022", 3)),
            True,
            False,
        ),
        ("as kubelet writes it, again", a, True, True),
    ]


@pytest.mark.parametrize("what", [v[0] for v in copy_variations()])
def test_the_cpu_data_string_is_checked_against_the_copy(what: str, tmp_path: Path) -> None:
    reader = Reader("cpu", tmp_path / "cpu")
    a, b = base("cpu")
    for data in (a, b, a):  # the tables then hold their bodies escaped
        reader.read(data)
    unescaped = reader.state.last.unescaped
    [(_, data, fast_expected, in_copy)] = [v for v in copy_variations() if v[0] == what]
    _, fast = reader.read(data)
    assert fast == fast_expected
    assert (reader.state.last.unescaped == unescaped) == in_copy
    # The cache still holds a whole file: the base reads in the copy again.
    unescaped = reader.state.last.unescaped
    _, fast = reader.read(a)
    assert fast and reader.state.last.unescaped == unescaped


def test_a_pod_listed_twice_after_a_read_from_the_summary(tmp_path: Path) -> None:
    """A new member that lists a pod a kept member lists: not unique (Go keeps the last), so
    its items are built, and the delta is unknown for it and the read after."""
    reader = Reader("cpu", tmp_path / "cpu")
    a, b = base("cpu")
    reader.read(a)
    reader.read(b)
    data = data_of(b)
    start, end = member_span(data, _uid(4))
    twice = data[:start] + data[start:end].replace(_uid(4), _uid(1), 1) + data[end:]
    got, fast = reader.read(with_data("cpu", twice))
    assert got[0] == "ok" and fast
    assert got[1].delta.keys is None and not isinstance(got[1].items, LazyItems)
    got, fast = reader.read(b)
    assert fast and got[1].delta.keys is None  # against a read whose pods were not unique
    got, fast = reader.read(a)
    assert fast and got[1].delta.keys is not None


def test_a_state_set_between_syncs_is_not_taken_for_the_last_read(tmp_path: Path) -> None:
    """The held items are the set state's, not the last read's: the sync compares them all."""
    path = tmp_path / "cpu"
    a, b = base("cpu")
    with PodStore.open(tmp_path / "s.db") as store:
        path.write_bytes(a)
        store.import_node_checkpoint(path, kind="cpu")
        state = cpu_state(PODS, 4)
        state.entries = {_uid(9): {"other": frozenset({40})}}
        state.pod_entries = {}
        store.set_cpu_state(CPUManagerState(state.policy_name, frozenset({0}), state.entries, {}))
        path.write_bytes(b)
        store.import_node_checkpoint(path, kind="cpu")
        with store._sessions.snapshot() as conn:
            have = node_sync.current_items(conn)
    with PodStore.open(tmp_path / "fresh.db") as fresh:
        fresh.import_node_checkpoint(path, kind="cpu")
        with fresh._sessions.snapshot() as conn:
            assert have == node_sync.current_items(conn)


def test_a_delta_that_does_not_fit_the_held_items_compares_them_all(tmp_path: Path) -> None:
    """apply_items counts: a delta that misses a key the store holds (against other items
    than its base's) is not trusted."""
    a, _ = base("cpu")
    with PodStore.open(tmp_path / "s.db") as store:
        (tmp_path / "a").write_bytes(a)
        store.import_node_checkpoint(tmp_path / "a", kind="cpu")
        wanted = node_sync.prepare(tmp_path / "a", "cpu").items
        gone = next(k for k in wanted if k[1] == "sidecar")
        new = {k: v for k, v in wanted.items() if k != gone}
        added = (_uid(99), "late", "cpu")
        new[added] = new[(_uid(0), "main", "cpu")]
        # A delta that names the added key only, not the one that went.
        delta = Delta(1, 2, (added,), {added: new[added]})
        with store._sessions.write() as conn:
            written, deleted = node_sync.apply_items(conn, cpu.PART, new, None, delta)
        assert (written, deleted) == (1, 1)
        with store._sessions.snapshot() as conn:
            assert cpu.PART.stored(conn).keys() == new.keys()
