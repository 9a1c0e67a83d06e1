"""storage/node/incremental.py: reading a CPU, memory or DRA file again with the members of
its last version cached gives exactly what a fresh full read gives — the same PreparedNode
(items in the same order) or the same error, type and message — for kubelet's rewrites and
for every damage the fast path must hand to the full decoder; and a store fed so ends as
one fed by full reads."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fnv_hash_fast import fnv1a_32

from bench.nodefiles import _uid, cpu_state, dra_state, memory_state
from podstore import PodStore
from podstore.checkpoint import (
    DRADevice,
    MemoryBlock,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
)
from podstore.storage.node import sync as node_sync
from podstore.storage.node.incremental import NodeReadState

PODS = 6


def outcome(read: Callable[[], node_sync.PreparedNode]) -> Any:
    try:
        p = read()
    except Exception as exc:
        return ("error", type(exc), str(exc))
    return ("ok", p, list(p.items.items()))


class Reader:
    """Reads one file again and again through one state, checking each read against a fresh
    full read of the same bytes; says whether the fast path took it."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self.state = NodeReadState()

    def read(self, data: bytes) -> tuple[Any, bool]:
        self.path.write_bytes(data)
        want = outcome(lambda: node_sync.prepare(self.path, self.kind))
        before = self.state.fast
        got = outcome(lambda: node_sync.prepare(self.path, self.kind, state=self.state))
        assert got == want
        return got, self.state.fast > before


# -- building files ---------------------------------------------------------------------------


def data_of(raw: bytes) -> str:
    doc = json.loads(raw)
    return str(doc["data"] if "data" in doc else doc["Data"])


def copy_of(kind: str, data: str) -> str:
    """The older copy kubelet writes beside ``data``: its leading members."""
    cut = data.find(',"podEntries":') if kind == "memory" else -1
    return data[1:cut] if cut > 0 else data[1 : data.rindex("}")]


def with_data(kind: str, data: str, *, copy: str | None = None, stored: int | None = None) -> bytes:
    """A file of ``kind`` holding ``data``: CPU v4 / memory v3 with the older copy (by default
    ``data``'s leading members, as kubelet writes it), DRA in the data format; checksum fresh
    unless ``stored``."""
    encoded = json.dumps(data)
    if kind == "dra":
        crc = zlib.crc32(data.encode()) if stored is None else stored
        return f'{{"Data":{encoded},"Checksum":{crc}}}'.encode()
    if copy is None:
        copy = copy_of(kind, data)
    fnv = fnv1a_32(b"(string)" + data.encode()) if stored is None else stored
    return f'{{{copy},"checksum":0,"data":{encoded},"dataChecksum":{fnv}}}'.encode()


def base(kind: str) -> tuple[bytes, bytes]:
    """Two files as kubelet writes them, one container (or claim) apart."""
    if kind == "cpu":
        a, b = cpu_state(PODS, 4), cpu_state(PODS, 4)
        b.entries[_uid(0)] = {**b.entries[_uid(0)], "sidecar": frozenset({1})}
        return dumps_cpu_state(a), dumps_cpu_state(b)
    if kind == "memory":
        m, n = memory_state(PODS, 3), memory_state(PODS, 3)
        assert n.entries is not None
        n.entries[_uid(0)] = {"main": [MemoryBlock([1], "memory", 1 << 30)]}
        return dumps_memory_state(m), dumps_memory_state(n)
    d, e = dra_state(PODS), dra_state(PODS)
    assert e.claims is not None and e.claims[0].driver_state is not None
    devices = e.claims[0].driver_state["gpu.example.com"]
    assert devices is not None
    devices.pop()
    return dumps_dra_state(d), dumps_dra_state(e)


def added_and_removed(kind: str) -> tuple[bytes, bytes]:
    if kind == "cpu":
        more, less = cpu_state(PODS + 1, 4), cpu_state(PODS, 4)
        del less.entries[_uid(2)], less.pod_entries[_uid(2)]
        return dumps_cpu_state(more), dumps_cpu_state(less)
    if kind == "memory":
        mm, ml = memory_state(PODS + 1, 3), memory_state(PODS, 3)
        assert ml.entries is not None and ml.pod_entries is not None
        del ml.entries[_uid(2)], ml.pod_entries[_uid(2)]
        return dumps_memory_state(mm), dumps_memory_state(ml)
    dm, dl = dra_state(PODS + 1), dra_state(PODS)
    assert dl.claims is not None
    del dl.claims[2]
    return dumps_dra_state(dm), dumps_dra_state(dl)


def invalid_utf8(kind: str, data: str) -> bytes:
    """A file whose ``data`` string holds a byte that is not UTF-8 (Go reads it as U+FFFD),
    the checksum over what Go reads."""
    inside = INSIDE[kind][0]
    marked = data.replace(inside, inside[:-2] + "@@" + inside[-2:], 1)
    fixed = with_data(kind, marked.replace("@@", "\ufffd"))
    stored = int(fixed[fixed.rindex(b":") + 1 : -1])
    return with_data(kind, marked, stored=stored).replace(b"@@", b"\xff")


def no_comma(kind: str, data: str) -> str:
    """``data`` without the comma between its second and third pod (claim)."""
    start, _ = member_span(data, SECOND[kind])
    assert data[start - 1] == ","
    return data[: start - 1] + data[start:]


def member_span(data: str, needle: str) -> tuple[int, int]:
    """Where the member of an ``entries`` map (or a claim) holding ``needle`` starts and
    ends in ``data`` (by the scanner, as the code under test does not)."""
    at = data.index(needle)
    dec = json.JSONDecoder()
    if data.startswith('{"kind"'):
        start = data.rindex('{"ClaimUID"', 0, at)
        return start, dec.raw_decode(data, start)[1]
    start = max(data.rfind(',"', 0, at), data.rfind('{"', 0, at)) + 1
    key_end = json.decoder.scanstring(data, start + 1)[1]  # type: ignore[attr-defined]
    return start, dec.raw_decode(data, key_end + 1)[1]


def reordered(data: str, first: str, second: str) -> str:
    """``data`` with two members swapped."""
    a0, a1 = member_span(data, first)
    b0, b1 = member_span(data, second)
    assert a1 < b0
    return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]


# What each kind's files hold, for the variations below: a text inside one member of the
# first pod (or claim), and the same text changed.
INSIDE = {
    "cpu": ('"main":"4-5"', '"main":"4-9"'),
    "memory": ('"type":"hugepages-1Gi","size":1073741824', '"type":"hugepages-1Gi","size":1024'),
    "dra": ('"DeviceName":"gpu-1"', '"DeviceName":"gpu-7"'),
}
# A value of the wrong Go type in that member.
WRONG_TYPE = {
    "cpu": ('"main":"4-5"', '"main":5'),
    "memory": ('"size":1073741824', '"size":"1073741824"'),
    "dra": ('"DeviceName":"gpu-1"', '"DeviceName":1'),
}
# An integer of the member, as 1.0 and as true (Python: 1 == 1.0 == True).
NUMBER = {
    "cpu": None,
    "memory": ('"numaAffinity":[0]', ('"numaAffinity":[0.0]', '"numaAffinity":[false]')),
    "dra": None,
}
FIRST = {"cpu": _uid(0), "memory": _uid(0), "dra": "gpu-claim-0"}
SECOND = {"cpu": _uid(3), "memory": _uid(3), "dra": "gpu-claim-3"}


def variations(kind: str) -> list[tuple[str, bytes, bool]]:
    """(what, file, whether the fast path must take it) after the base file was read."""
    a, b = base(kind)
    data = data_of(a)
    inside, changed = INSIDE[kind]
    wrong, wrong_to = WRONG_TYPE[kind]
    assert data.count(inside) >= 1 and data.count(wrong) >= 1
    more, less = added_and_removed(kind)
    swapped = reordered(data, FIRST[kind], SECOND[kind])
    flipped = data.replace(inside, changed, 1)
    out = [
        ("one changed", b, True),
        ("back", a, True),
        ("added", more, True),
        ("removed", less, True),
        ("reordered", with_data(kind, swapped), True),
        ("byte changed inside a cached member", with_data(kind, flipped), True),
        ("stale checksum", with_data(kind, flipped, stored=zlib.crc32(b"x")), False),
        ("checksum off by one", a.replace(b'Checksum":', b'Checksum":1', 1), False),
        (
            "wrong type in a cached-looking member",
            with_data(kind, data.replace(wrong, wrong_to, 1)),
            False,
        ),
        ("truncated", a[:-1], False),
        ("trailing space", a + b" ", False),
        ("trailing garbage", a + b"}", False),
        ("space after data", with_data(kind, data + " "), False),
        ("text after data", with_data(kind, data + "}"), False),
        ("missing comma between members", with_data(kind, no_comma(kind, data)), False),
        ("invalid UTF-8 in a member", invalid_utf8(kind, data), kind == "dra"),
        ("pretty", json.dumps(json.loads(a), indent=1).encode(), False),
        ("again", a, True),
        (
            "NaN in a member",
            with_data(kind, data.replace(wrong, wrong.split(":")[0] + ":NaN", 1)),
            False,
        ),
    ]
    if kind in ("cpu", "memory"):
        copy_end = a.rindex(b',"checksum":')
        copy = a[1:copy_end].decode()
        out += [
            # The older copy decodes apart from data: a type error there fails the read, a
            # copy that differs from data does not.
            (
                "wrong type in the copy only",
                with_data(kind, data, copy=copy.replace(wrong, wrong_to, 1)),
                False,
            ),
            ("copy of another file", with_data(kind, data, copy=data_of(b)[1:-1]), False),
            (
                "copy reordered",
                with_data(kind, data, copy=reordered(data, FIRST[kind], SECOND[kind])[1:-1]),
                False,
            ),
            (
                "checksum 0.0",
                a.replace(b'"checksum":0', b'"checksum":0.0', 1)
                if kind == "cpu"
                else a.replace(b'"checksum":', b'"checksum":1.0', 1),
                False,
            ),
        ]
    if kind == "cpu":
        # A pod given twice (first place, last value), a key holding '":', an escape.
        dup = data.replace(f'"{_uid(1)}":', f'"{_uid(0)}":', 1)
        odd = data.replace('"sidecar":"6"', '"side\\":car":"6"', 1)
        esc = data.replace(f'"{_uid(2)}"', '"\\u0030' + _uid(2)[1:] + '"', 1)
        bad_cpus = data.replace(inside, '"main":"5-4"', 1)
        out += [
            ("pod twice", with_data(kind, dup), True),
            ("key with a quote", with_data(kind, odd), True),
            ("escaped key", with_data(kind, esc), True),
            ("invalid cpuset in a member", with_data(kind, bad_cpus), False),
            ("v3 file", dumps_cpu_state(cpu_state(PODS, 3)), False),
            ("v2 file", dumps_cpu_state(cpu_state(PODS, 2)), False),
        ]
    if kind == "memory":
        number, (as_float, as_bool) = NUMBER["memory"]  # type: ignore[misc]
        big = data.replace('"size":1073741824', f'"size":{1 << 63}', 1)
        cut = data.rindex('"size":1073741824')
        big_own = data[:cut] + data[cut:].replace("1073741824", str(1 << 63), 1)
        out += [
            ("1.0 for 1", with_data(kind, data.replace(number, as_float, 1)), False),
            ("true for 1", with_data(kind, data.replace(number, as_bool, 1)), False),
            ("size above the store's integers", with_data(kind, big), False),
            ("a pod's own size above them", with_data(kind, big_own), False),
            ("00 for node 0", with_data(kind, data.replace('{"0":', '{"00":', 1)), True),
            ("v2 file", dumps_memory_state(memory_state(PODS, 2)), False),
            ("v1 file", dumps_memory_state(memory_state(PODS, 1)), False),
        ]
    if kind == "dra":
        shared = dra_state(PODS)
        shared.share_ids = True
        assert shared.claims is not None and shared.claims[1].driver_state is not None
        shared.claims[1].driver_state["gpu.example.com"] = [
            DRADevice("node-1", "gpu-2", None, None, "s")
        ]
        twice = data.replace(_uid(1_000_001), _uid(1_000_000))
        out += [
            ("share ids", dumps_dra_state(shared), True),
            ("claim listed twice", with_data(kind, twice), False),
            # Go folds the long s to S: the device has a share id, but the reader's test of
            # the text does not see one.
            (
                "long s in ShareID",
                with_data(kind, data.replace('"DeviceName"', '"\u017fhareID":"s","DeviceName"', 1)),
                True,
            ),
            (
                "1.0 for the checksum",
                a.replace(b'"Checksum":', b'"Checksum":1.0', 1)[:-1] + b"}",
                False,
            ),
            ("true for the checksum", a[: a.rindex(b":") + 1] + b"true}", False),
            ("v1 layout", b'{"version":"v1","entries":null,"checksum":0}', False),
        ]
    return out


KINDS = ("cpu", "memory", "dra")


@pytest.mark.parametrize("kind", KINDS)
def test_every_variation_reads_as_a_fresh_full_read(kind: str, tmp_path: Path) -> None:
    reader = Reader(kind, tmp_path / kind)
    a, _ = base(kind)
    first, fast = reader.read(a)
    assert first[0] == "ok" and fast
    for what, data, fast_expected in variations(kind):
        _, fast = reader.read(data)
        assert fast == fast_expected, what
        # The cache still holds the last good file: the base file reads fast again.
        _, fast = reader.read(a)
        assert fast, what


@pytest.mark.parametrize("kind", KINDS)
def test_a_one_change_rewrite_converts_one_member(kind: str, tmp_path: Path) -> None:
    reader = Reader(kind, tmp_path / kind)
    a, b = base(kind)
    reader.read(a)
    misses = sum(c.misses for c in reader.state.tables.values())
    for data in (b, a, b):
        reader.read(data)
    now = sum(c.misses for c in reader.state.tables.values())
    assert now - misses <= 3 * 2  # one member per rewrite (memory: its pod's two maps)
    # Only the last file's members are kept.
    for cache in reader.state.tables.values():
        assert len(cache.order) <= PODS + 2 and not cache.new


def _events(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT op, pod_uid, container, resource, device_ids, released "
            "FROM allocation_events ORDER BY seq"
        ).fetchall()


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_fed_so_ends_as_one_fed_by_full_reads(kind: str, tmp_path: Path) -> None:
    path = tmp_path / kind
    cached_db, full_db = tmp_path / "cached.db", tmp_path / "full.db"
    a, b = base(kind)
    sequence = [a, b, *[v for _, v, _ in variations(kind)], b, a]
    with PodStore.open(cached_db) as cached, PodStore.open(full_db) as full:
        for data in sequence:
            path.write_bytes(data)
            try:
                got = ("ok", cached.import_node_checkpoint(path, kind=kind))
            except Exception as exc:
                got = ("error", type(exc), str(exc))
            try:
                prepared = node_sync.prepare(path, kind)
                with full._sessions.write() as conn:
                    want = ("ok", node_sync.apply(conn, prepared))
            except Exception as exc:
                want = ("error", type(exc), str(exc))
            assert got == want
        assert cached._node_states[(kind, str(path))].fast >= 8
        with cached._sessions.snapshot() as c1, full._sessions.snapshot() as c2:
            assert node_sync.current_items(c1) == node_sync.current_items(c2)
            rows = "SELECT kind, version, form FROM node_files ORDER BY kind"
            assert c1.execute(rows).fetchall() == c2.execute(rows).fetchall()
    assert _events(cached_db) == _events(full_db)


def test_states_are_per_kind_and_path_bounded_and_forgotten_after_fork(tmp_path: Path) -> None:
    a, _ = base("cpu")
    with PodStore.open(tmp_path / "s.db") as store:
        for i in range(10):
            path = tmp_path / f"cpu-{i}"
            path.write_bytes(a)
            store.import_node_checkpoint(path, kind="cpu")
        assert 1 <= len(store._node_states) <= 6
        store.import_node_checkpoint(path, kind="auto")  # auto: the full path, no state
        assert all(kind == "cpu" for kind, _ in store._node_states)
        if not hasattr(os, "fork"):
            return
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(0 if store._node_states == {} else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def _rewrites(kind: str, rng: random.Random, count: int, pods: int = 60) -> list[bytes]:
    """Files as kubelet writes them, each a few pods (claims) added, removed, changed, emptied
    or (DRA) moved since the one before."""
    out: list[bytes] = []
    if kind == "cpu":
        c = cpu_state(pods, 4)
        for n in range(count):
            for _ in range(rng.randint(1, 4)):
                uid = _uid(rng.randrange(pods + 20))
                roll = rng.random()
                if uid in c.entries and roll < 0.3:
                    del c.entries[uid]
                    c.pod_entries.pop(uid, None)
                elif roll < 0.45:
                    c.entries[uid] = {}  # a pod with no container: the form lists it
                    c.pod_entries.pop(uid, None)
                else:
                    c.entries[uid] = {"main": frozenset({rng.randrange(64)}), f"c{n}": frozenset()}
                    c.pod_entries[uid] = frozenset({rng.randrange(64)})
            if rng.random() < 0.2:
                c.default_cpu_set = frozenset(range(rng.randrange(1, 8)))
            out.append(dumps_cpu_state(c))
    elif kind == "memory":
        m = memory_state(pods, 3)
        assert m.entries is not None and m.pod_entries is not None
        for n in range(count):
            for _ in range(rng.randint(1, 4)):
                uid = _uid(rng.randrange(pods + 20))
                if uid in m.entries and rng.random() < 0.4:
                    del m.entries[uid]
                    m.pod_entries.pop(uid, None)
                else:
                    blocks = [MemoryBlock([rng.randrange(2)], "memory", rng.randrange(1, 1 << 40))]
                    m.entries[uid] = {"main": blocks} if n % 5 else None
                    m.pod_entries[uid] = blocks
            out.append(dumps_memory_state(m))
    else:
        d = dra_state(pods)
        assert d.claims is not None
        spare = dra_state(pods + 20).claims
        assert spare is not None
        for _ in range(count):
            for _ in range(rng.randint(1, 4)):
                roll = rng.random()
                if roll < 0.3 and d.claims:
                    del d.claims[rng.randrange(len(d.claims))]
                elif roll < 0.5 and len(d.claims) > 1:
                    i, j = rng.randrange(len(d.claims)), rng.randrange(len(d.claims))
                    d.claims[i], d.claims[j] = d.claims[j], d.claims[i]
                else:
                    new = spare[rng.randrange(len(spare))]
                    if all(c.claim_uid != new.claim_uid for c in d.claims):
                        d.claims.insert(rng.randrange(len(d.claims) + 1), new)
            out.append(dumps_dra_state(d))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_random_rewrites_read_as_fresh_full_reads(kind: str, tmp_path: Path) -> None:
    rng = random.Random(f"node-incremental-{kind}")
    reader = Reader(kind, tmp_path / kind)
    for data in _rewrites(kind, rng, 40):
        got, fast = reader.read(data)
        assert got[0] == "ok" and fast
    assert reader.state.fast == 40
    hits = sum(c.hits for c in reader.state.tables.values())
    misses = sum(c.misses for c in reader.state.tables.values())
    assert hits > 5 * misses


def test_reads_sharing_a_state_take_turns(tmp_path: Path) -> None:
    """Threads reading through one state (the store hands one per kind and path): the lock
    makes each read see the cache as the last whole read left it."""
    one, other = cpu_state(200, 4), cpu_state(200, 4)
    for i in range(0, 200, 7):
        other.entries[_uid(i)] = {"main": frozenset({i})}
    paths = [tmp_path / "a", tmp_path / "b"]
    for path, state_ in zip(paths, (one, other), strict=True):
        path.write_bytes(dumps_cpu_state(state_))
    want = [list(node_sync.prepare(p, "cpu").items.items()) for p in paths]
    state = NodeReadState()
    failures: list[object] = []

    def reader(which: int) -> None:
        try:
            for _ in range(100):
                got = node_sync.prepare(paths[which], "cpu", state=state)
                if list(got.items.items()) != want[which]:
                    failures.append(which)
        except Exception as exc:  # a read that broke on the other's half-made cache
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reader, args=(i % 2,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    assert state.fast > 0


# -- DRA: claims matched by their escaped text (storage/node/escaped.py) -----------------------

ESCAPED = "Entries (escaped)"


def _dra_with(change: Callable[[Any], None]) -> bytes:
    d = dra_state(PODS)
    change(d)
    return dumps_dra_state(d)


def _rename(i: int, name: str) -> Callable[[Any], None]:
    def change(d: Any) -> None:
        d.claims[i] = d.claims[i].__class__(
            d.claims[i].claim_uid,
            name,
            *[getattr(d.claims[i], f) for f in ("namespace", "pod_uids", "driver_state")],
        )

    return change


def _many_devices(count: int) -> Callable[[Any], None]:
    def change(d: Any) -> None:
        d.claims[2].driver_state["gpu.example.com"] = [
            DRADevice("node-1", f"gpu-{k}", ["gpus"], None) for k in range(count)
        ]

    return change


def test_dra_claims_are_matched_by_their_escaped_text(tmp_path: Path) -> None:
    """Kubelet's DRA file is read without unescaping its Data string whole: claims are taken
    by their escaped text, a new one is unescaped alone, and the result is the full read's —
    also where a claim's text holds what looks like an element's end, or escapes beyond the
    quote."""
    reader = Reader("dra", tmp_path / "dra")
    a, b = base("dra")
    reader.read(a)
    cache = reader.state.tables[ESCAPED]
    assert len(cache.order) == PODS
    rewrites = [
        ("one changed", b),
        ("an element's end in a name", _dra_with(_rename(1, 'x"},{"ClaimUID":"y'))),
        ("<, > and & (Go escapes them)", _dra_with(_rename(3, "a<b>&c"))),
        ("a backslash", _dra_with(_rename(4, "back\\slash"))),
        ("added", added_and_removed("dra")[0]),
        ("removed", added_and_removed("dra")[1]),
        ("back", a),
        # An escape the decoder turns into U+FFFD (or refuses): the full read's outcome.
        ("lone surrogate", with_data("dra", data_of(a).replace("gpu-claim-1", "\\ud800"))),
        ("back again", a),
    ]
    for what, data in rewrites:
        hits, misses = cache.hits, cache.misses
        got, fast = reader.read(data)
        assert got[0] == "ok" and fast, what
        assert len(cache.order) == len(json.loads(json.loads(data)["Data"])["Entries"]), what
        # Each file is one or two claims away from the one before.
        assert cache.misses - misses <= 2 and cache.hits - hits >= PODS - 3, what
    # Damage inside a claim no earlier file had, where only the escaped scan looks: the full
    # read's error. Text after the claim's value; a bare quote (the Data string ends there)
    # placed so that the claim's pieces, cut at the quote, still spell the old claim.
    reader.read(a)
    changed = data_of(a).replace(*INSIDE["dra"], 1)
    _, end = member_span(changed, FIRST["dra"])
    junk = with_data("dra", changed[:end] + "0}" + changed[end:])
    text = with_data("dra", changed).decode()
    device_end = text.index("},", text.index("gpu-7"))
    bare = (text[:device_end] + '}"' + text[device_end:]).encode()
    for what, data in (("text after a claim", junk), ("a bare quote in a claim", bare)):
        got, fast = reader.read(data)
        assert got[0] == "error" and not fast, what
    # Only the escaped table was used.
    assert all(not c.order for name, c in reader.state.tables.items() if name != ESCAPED)


@pytest.mark.parametrize(
    ("what", "change"),
    [
        # Text that is not ASCII: Go's rule for lone surrogates is the unescaped path's.
        ("long s in a name", _rename(1, "\u017f")),
        # A new claim with more candidate ends than the escaped scan tries.
        ("a claim with 80 devices", _many_devices(80)),
    ],
)
def test_dra_files_the_escaped_scan_declines_are_read_unescaped(
    what: str, change: Callable[[Any], None], tmp_path: Path
) -> None:
    reader = Reader("dra", tmp_path / "dra")
    a, _ = base("dra")
    reader.read(a)
    data = _dra_with(change)
    _, fast = reader.read(data)
    assert fast, what  # the unescaped path took it, with the full read's result
    assert not reader.state.tables[ESCAPED].order, what
    assert reader.state.tables["Entries"].order, what
    # And the next kubelet file goes back to the escaped table.
    _, fast = reader.read(a)
    assert fast and len(reader.state.tables[ESCAPED].order) == PODS
