"""checkpoint/incremental.py: reading a file again with the entries of its last version cached
gives exactly what read_checkpoint gives — the same Checkpoint or the same error — for kubelet's
rewrites, for every vector, and for random damage to a file whose entries are cached."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from harness.watch_support import mutate, random_state, reordered
from hypothesis import given, settings
from hypothesis import strategies as st

from podstore.checkpoint import read_checkpoint
from podstore.checkpoint.incremental import EntryCache, read_cached

VECTORS = Path(__file__).resolve().parent / "vectors"


def outcome(read: object) -> object:
    try:
        return ("ok", read())  # type: ignore[operator]
    except Exception as exc:
        return ("error", type(exc), str(exc))


def same(path: Path, cache: EntryCache) -> None:
    want = outcome(lambda: read_checkpoint(path))
    got = outcome(lambda: read_cached(path, cache))
    assert got == want


def test_rewrites_hit_the_cache_and_read_the_same(tmp_path: Path) -> None:
    rng = random.Random(41)
    path = tmp_path / "cp"
    state = random_state(rng, 40)
    cache = EntryCache()
    state.write(path)
    same(path, cache)
    assert cache.hits == 0 and cache.misses == len(state.entries or [])
    for _ in range(10):
        state = mutate(rng, state, 2)
        state.write(path)
        before = cache.hits
        same(path, cache)
        assert cache.hits > before
        again = reordered(rng, state)
        again.write(path)
        same(path, cache)
    # Only the last file's entries are kept.
    assert len(cache.entries) == len({e for e in cache.entries})


@pytest.mark.parametrize(
    "vector",
    sorted(
        p.name
        for p in VECTORS.glob("*.json")
        if not p.name.endswith(".expect.json") and p.name != "MANIFEST.json"
    ),
)
def test_every_vector_reads_the_same_with_a_warm_cache(vector: str, tmp_path: Path) -> None:
    cache = EntryCache()
    # Warm the cache with the vector itself and with a kubelet-layout file.
    same(VECTORS / vector, cache)
    same(VECTORS / vector, cache)


EDITS = st.lists(
    st.tuples(
        st.integers(0, 10**6),
        st.sampled_from(["flip", "cut", "insert", "dup"]),
        st.sampled_from(
            [
                b",",
                b"}",
                b"]",
                b" ",
                b'"',
                b"\\",
                b"0",
                b"x",
                b"\xff",
                b'"PodDeviceEntries":[]',
                b'"podDeviceEntries":null',
                b'"Data":{}',
                b"\\u0041",
                b"\xef\xbb\xbf",
            ]
        ),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300)
@given(seed=st.integers(0, 2**32 - 1), edits=EDITS)
def test_damage_to_a_cached_file_reads_the_same(
    tmp_path_factory: pytest.TempPathFactory, seed: int, edits: list[tuple[int, str, bytes]]
) -> None:
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("inc") / "cp"
    state = random_state(rng, rng.randint(0, 6))
    data = state.data()
    path.write_bytes(data)
    cache = EntryCache()
    same(path, cache)  # warm: every entry of the good file is cached
    damaged = bytearray(data)
    for where, kind, text in edits:
        at = where % (len(damaged) + 1)
        if kind == "flip" and at < len(damaged):
            damaged[at] ^= 1 << (where % 8)
        elif kind == "cut":
            del damaged[at : at + 1 + where % 7]
        elif kind == "insert":
            damaged[at:at] = text
        else:  # repeat a stretch: duplicated keys, elements, braces
            damaged[at:at] = damaged[at : at + 1 + where % 40]
    path.write_bytes(bytes(damaged))
    same(path, cache)
    path.write_bytes(data)
    same(path, cache)


def test_tricky_but_valid_files(tmp_path: Path) -> None:
    from podstore import PodDevicesEntry
    from podstore.checkpoint import dumps_checkpoint

    path = tmp_path / "cp"
    marker = PodDevicesEntry("p", "c", "r", {0: ['x},{"PodUID":"y', "}],"]}, b"")
    plain = PodDevicesEntry("q", "c", "r", {0: ["z"]}, b"")
    cache = EntryCache()
    for entries in ([marker, plain], [plain, marker], [marker, marker, plain], [plain, plain]):
        path.write_bytes(dumps_checkpoint(entries, {"r": ["}],"]}))
        same(path, cache)
        same(path, cache)
    assert cache.hits > 0
    # A second PodDeviceEntries key decodes into the first one's elements (Go issue 21092):
    # the cache must leave that to the full decoder.
    good = dumps_checkpoint([plain, marker], None).decode()
    body = good.replace(
        ',"RegisteredDevices":null',
        ',"RegisteredDevices":null,"PodDeviceEntries":[{"ContainerName":"other"}]',
    )
    path.write_text(body)
    same(path, cache)
