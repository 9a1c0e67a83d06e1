"""Hostile input: junk for every argument of every public method, and junk checkpoint bytes.

For each call: it succeeds, or it raises a documented podstore error (PodStoreError and its
subclasses: InvalidInputError, CheckpointError, …) — never TypeError, OverflowError, a raw
sqlite3 error or anything else. A call that raised changed nothing: every table is compared
before and after. A call that succeeded leaves a store that passes the self-check.

Arguments are drawn per parameter: usually a plausible value, sometimes junk (wrong types,
huge ints, NaN, lone surrogates, NUL, nested containers, objects), so most examples probe one
bad argument at a time. Paths are always kept inside the test's temporary directory.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.figures import report
from harness.paths import child_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podstore import (
    ContainerAllocateResponse,
    PodDevicesEntry,
    PodStore,
    PodStoreError,
)
from podstore.storage.selfcheck import check_connection, has_errors

# Half as many again as the hypothesis profile's count (conftest.py: ci 100, thorough 1000):
# these tests guard every public argument, so they get more than a typical property test.
FUZZ = settings(
    max_examples=int(
        os.environ.get("PODSTORE_FUZZ_EXAMPLES", str(settings.default.max_examples * 3 // 2))
    ),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ---- strategies -------------------------------------------------------------------------------

weird_text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec=None), max_size=8),  # includes lone surrogates
    st.sampled_from(
        [
            "",
            "\x00",
            "a\x00b",
            "\ud800",
            "💥" * 3,
            "x" * 5000,
            "'; DROP TABLE pods; --",
            "%",
            "_",
            "\u202e",
            "\ufeff",
            "NULL",
            "null",
        ]
    ),
)
huge_ints = st.one_of(
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**100, -(10**100)]),
)
specials: st.SearchStrategy[Any] = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        -1,
        -0.0,
        2**63,
        10**100,
        1e300,
        True,
        False,
        "",
        "\x00",
        "\ud800",
        b"",
        b"\xff",
        (),
        [],
        {},
        frozenset(),
        None,
    ]
)
scalars = st.one_of(
    specials,
    st.none(),
    st.booleans(),
    huge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    weird_text,
    st.binary(max_size=40),
    st.just(object()),
    st.just(math.nan),
    st.just(Ellipsis),
)


def _entries(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(PodDevicesEntry, children, children, children, children, children)


junk: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.one_of(huge_ints, weird_text, st.none()), children, max_size=4),
        st.frozensets(st.one_of(huge_ints, weird_text), max_size=4),
        st.sets(weird_text, max_size=4),
        _entries(children),
    ),
    max_leaves=12,
)

names = st.one_of(st.sampled_from(["p0", "p1", "c0", "c1", "gpu", "nic"]), weird_text)
device_lists = st.one_of(st.none(), st.lists(names, max_size=4), st.sets(names, max_size=3), junk)
devices = st.one_of(
    st.none(),
    st.dictionaries(st.one_of(st.sampled_from([-1, 0, 1]), huge_ints), device_lists, max_size=3),
    junk,
)


def _response() -> st.SearchStrategy[Any]:
    def build(envs: dict[str, str], n: int) -> ContainerAllocateResponse:
        msg = ContainerAllocateResponse()
        for k, v in envs.items():
            msg.envs[k] = v
        for i in range(n):
            d = msg.devices.add()
            d.host_path = f"/dev/x{i}"
        return msg

    text = st.text(max_size=6)
    message = st.builds(build, st.dictionaries(text, text, max_size=3), st.integers(0, 2))
    return st.one_of(
        st.none(),
        message,
        message.map(lambda m: m.SerializeToString()),
        st.binary(max_size=30),
        junk,
    )


responses = _response()


def _maybe_junk(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(good, good, good, junk)


text_arg = _maybe_junk(names)
entries_arg = _maybe_junk(
    st.lists(
        st.builds(
            PodDevicesEntry,
            text_arg,
            text_arg,
            text_arg,
            devices,
            st.one_of(st.none(), st.binary(max_size=20), responses),
        ),
        max_size=5,
    )
)
registered_arg = _maybe_junk(st.one_of(st.none(), st.dictionaries(names, device_lists, max_size=3)))
accumulator = _maybe_junk(
    st.dictionaries(names, st.one_of(st.sets(names, max_size=3), junk), max_size=3)
)

# ---- the store and its snapshot ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def store(fuzz_dir: Path) -> Iterator[PodStore]:
    s = PodStore.open(fuzz_dir / "fuzz.db")
    s.insert("p0", "c0", "gpu", {0: ["d0", "d1"], -1: ["d2"]}, b"")
    s.insert("p1", "c1", "nic", {1: ["d3"]}, None)
    s.set_registered_devices({"gpu": ["d0", "d1"]})
    yield s
    s.close()


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()


def _sound(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        findings = check_connection(conn, quick=True)
    finally:
        conn.close()
    assert not has_errors(findings), findings


# Calls made through _call in this module: refused with a documented error (store unchanged)
# or accepted (store verified); reported once the module is done.
CALLS = {"refused_unchanged": 0, "accepted_verified": 0}


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    before = CALLS.copy()
    yield
    if before != CALLS:
        report("fuzz", examples_per_test=FUZZ.max_examples, **CALLS)


def _call(store: PodStore, fn: Callable[[], object]) -> None:
    db = Path(store.path)
    before = _dump(db)
    try:
        fn()
    except PodStoreError:
        assert _dump(db) == before, "a failed call changed the store"
        CALLS["refused_unchanged"] += 1
        return
    except BaseException as exc:
        raise AssertionError(f"undocumented error escaped: {type(exc).__name__}: {exc}") from exc
    _sound(db)
    CALLS["accepted_verified"] += 1


# ---- one test per method ----------------------------------------------------------------------


@FUZZ
@given(text_arg, text_arg, text_arg, devices, responses)
def test_insert(store: PodStore, pod: Any, cont: Any, res: Any, devs: Any, resp: Any) -> None:
    _call(store, lambda: store.insert(pod, cont, res, devs, resp))


@FUZZ
@given(_maybe_junk(st.lists(text_arg, max_size=4)))
def test_delete(store: PodStore, uids: Any) -> None:
    _call(store, lambda: store.delete(uids))


@FUZZ
@given(entries_arg)
def test_from_checkpoint_data(store: PodStore, entries: Any) -> None:
    _call(store, lambda: store.from_checkpoint_data(entries))


@FUZZ
@given(registered_arg)
def test_set_registered_devices(store: PodStore, mapping: Any) -> None:
    _call(store, lambda: store.set_registered_devices(mapping))


@FUZZ
@given(text_arg, text_arg, text_arg, devices, responses, st.booleans())
def test_calls_inside_a_transaction(
    store: PodStore, pod: Any, cont: Any, res: Any, devs: Any, resp: Any, fail_later: bool
) -> None:
    """Inside transaction(): a failing call leaves the block usable (its savepoint is rolled
    back), and the block commits all or nothing."""

    class Abort(Exception):
        pass

    def block() -> None:
        with store.transaction():
            store.insert("txn-pod", "c", "gpu", {0: ["t0"]}, None)
            with contextlib.suppress(PodStoreError):
                store.insert(pod, cont, res, devs, resp)
            if fail_later:
                raise Abort

    db = Path(store.path)
    before = _dump(db)
    try:
        block()
    except Abort:
        assert _dump(db) == before
        return
    assert store.container_devices("txn-pod", "c", "gpu") == {"t0"}
    store.delete(["txn-pod"])
    _sound(db)


READS: dict[str, tuple[Callable[..., object], tuple[st.SearchStrategy[Any], ...]]] = {
    "has_pod": (PodStore.has_pod, (text_arg,)),
    "__contains__": (PodStore.__contains__, (junk,)),
    "container_devices": (PodStore.container_devices, (text_arg, text_arg, text_arg)),
    "pod_devices": (PodStore.pod_devices, (text_arg, text_arg)),
    "get_container_devices": (PodStore.get_container_devices, (text_arg, text_arg)),
    "get_pod_and_container_for_device": (
        PodStore.get_pod_and_container_for_device,
        (text_arg, st.one_of(st.none(), text_arg)),
    ),
    "add_container_allocated_resources": (
        PodStore.add_container_allocated_resources,
        (text_arg, text_arg, accumulator),
    ),
    "remove_container_allocated_resources": (
        PodStore.remove_container_allocated_resources,
        (text_arg, text_arg, accumulator),
    ),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reads(store: PodStore, name: str) -> None:
    method, strategies = READS[name]

    @FUZZ
    @given(st.tuples(*strategies))
    def run(args: tuple[Any, ...]) -> None:
        _call(store, lambda: method(store, *args))

    run()


@FUZZ
@given(text_arg, text_arg, junk, junk)
def test_device_run_container_options(
    store: PodStore, pod: Any, cont: Any, cdi_devices: Any, cdi_annotations: Any
) -> None:
    _call(
        store,
        lambda: store.device_run_container_options(
            pod, cont, cdi_devices=cdi_devices, cdi_annotations=cdi_annotations
        ),
    )


def test_argumentless_reads(store: PodStore) -> None:
    for fn in (
        store.pods,
        store.size,
        store.devices,
        store.to_checkpoint_data,
        store.registered_devices,
        store.stats,
        store.__len__,
    ):
        _call(store, fn)


def _paths(base: Path) -> st.SearchStrategy[Any]:
    safe = st.text("abcdefghij-_.", min_size=1, max_size=10).filter(lambda s: s not in (".", ".."))
    return st.one_of(
        safe.map(lambda n: str(base / n)),
        safe.map(lambda n: base / "missing-dir" / n),
        safe.map(lambda n: os.fsencode(base / n)),
        st.just(str(base)),  # a directory
        st.just(""),
        st.none(),
        huge_ints,
        st.lists(st.integers(), max_size=2),
    )


def test_export_and_import_checkpoint(store: PodStore, fuzz_dir: Path) -> None:
    base = fuzz_dir / "files"
    base.mkdir(exist_ok=True)
    good = base / "good-checkpoint"
    store.export_checkpoint(good)

    @FUZZ
    @given(st.one_of(_paths(base), st.just(good)), junk, junk, _maybe_junk(st.none()))
    def imports(path: Any, merge: Any, strict: Any, max_bytes: Any) -> None:
        _call(
            store,
            lambda: store.import_checkpoint(path, merge=merge, strict=strict, max_bytes=max_bytes),
        )

    @FUZZ
    @given(_paths(base), _maybe_junk(st.one_of(st.none(), names)))
    def exports(path: Any, boot_id: Any) -> None:
        _call(store, lambda: store.export_checkpoint(path, boot_id=boot_id))

    imports()
    exports()


# ---- opening ----------------------------------------------------------------------------------


def test_open_arguments(fuzz_dir: Path) -> None:
    base = fuzz_dir / "open"
    base.mkdir(exist_ok=True)
    paths = st.one_of(
        st.text("abcdef", min_size=1, max_size=6).map(lambda n: str(base / f"{n}.db")),
        st.text("abcdef", min_size=1, max_size=6).map(lambda n: base / f"{n}.db"),
        st.text("abcdef", min_size=1, max_size=6).map(lambda n: f"sqlite:///{base}/{n}.db"),
        st.sampled_from(
            [
                "",
                ":memory:",
                "sqlite://",
                "sqlite:///:memory:",
                "postgresql://h/db",
                "file::memory:?cache=shared",
                "mysql+pymysql://u@h/d",
                "sqlite:///",
            ]
        ),
        st.just(str(base)),  # a directory
        junk.filter(lambda v: not isinstance(v, (str, bytes))),
    )

    good: dict[str, st.SearchStrategy[Any]] = {
        "path": st.text("abcdef", min_size=1, max_size=6).map(lambda n: str(base / f"{n}.db")),
        "readonly": st.just(False),
        "upgrade": st.booleans(),
        "durability": st.sampled_from(["full", "normal"]),
        "busy_timeout": st.one_of(st.floats(0, 5), st.integers(0, 5)),
    }
    bad = {**dict.fromkeys(good, junk), "path": paths}

    @FUZZ
    @given(st.sampled_from(sorted(good)), st.data())
    def run(which: str, data: st.DataObject) -> None:
        # one argument at a time is junk, so that it is the one that reaches the code
        args = {k: data.draw(bad[k] if k == which else good[k], label=k) for k in good}
        path = args.pop("path")
        try:
            s = PodStore.open(path, **args)
        except PodStoreError:
            return
        except BaseException as exc:
            raise AssertionError(
                f"undocumented error escaped: {type(exc).__name__}: {exc}"
            ) from exc
        s.close()

    run()
    # nothing was created outside the test's directory
    assert not Path(":memory:").exists()


# ---- checkpoint bytes -------------------------------------------------------------------------


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=False), weird_text),
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(weird_text, c, max_size=4)),
    max_leaves=15,
)


def _mutations(valid: bytes) -> st.SearchStrategy[bytes]:
    def mutate(data: bytes, at: int, new: bytes, cut: bool) -> bytes:
        i = at % (len(data) + 1)
        return data[:i] + new + (b"" if cut else data[i + len(new) :])

    return st.builds(
        mutate, st.just(valid), st.integers(0, 10_000), st.binary(max_size=8), st.booleans()
    )


def test_checkpoint_bytes(store: PodStore, fuzz_dir: Path) -> None:
    """read_checkpoint on junk bytes raises only CheckpointError (or InvalidInputError), and
    import_checkpoint of the same bytes leaves the store unchanged."""
    import json as _json

    import podstore.checkpoint as ck

    valid = ck.dumps_checkpoint(store.to_checkpoint_data(), store.registered_devices())
    template = _json.loads(valid)
    source = st.one_of(
        st.binary(max_size=200),
        _mutations(valid),
        json_values.map(lambda v: _json.dumps(v).encode()),
        st.dictionaries(
            st.sampled_from(["Data", "Checksum", "PodDeviceEntries", "RegisteredDevices"]),
            json_values,
        ).map(lambda d: _json.dumps({**template, **d}).encode()),
        st.just(valid),
    )
    target = fuzz_dir / "in-checkpoint"

    @FUZZ
    @given(source)
    def run(data: bytes) -> None:
        try:
            ck.read_checkpoint(data)
        except PodStoreError:
            pass
        except BaseException as exc:
            raise AssertionError(
                f"read_checkpoint: undocumented error {type(exc).__name__}: {exc}"
            ) from exc
        target.write_bytes(data)
        _call(store, lambda: store.import_checkpoint(target, merge=True))

    run()


@pytest.mark.parametrize(("profile", "examples"), [("ci", 150), ("thorough", 1500)])
def test_example_count_follows_the_hypothesis_profile(profile: str, examples: int) -> None:
    """PODSTORE_HYPOTHESIS_PROFILE=thorough runs ten times the examples here too."""
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_FUZZ_EXAMPLES"}
    env["PODSTORE_HYPOTHESIS_PROFILE"] = profile
    code = "import conftest, test_reliability_fuzz as f; print(f.FUZZ.max_examples)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == examples
