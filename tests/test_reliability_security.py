"""Security: private files, a warning for shared ones, real read-only opens, no SQL formatting.

Root ignores file permissions, so read-only files and directories are tested from a
subprocess that drops to ``nobody`` (tests/harness/readonly_probe.py), and a read-only mount is
tested with a bind mount remounted ``ro``; both need root and skip (saying so) without it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.paths import script
from harness.recorder import recording

from podstore import (
    ContainerAllocateResponse,
    PodDevicesEntry,
    PodStore,
    ReadOnlyStoreError,
)

NOBODY = 65534
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT, reason="needs root: to drop to another user, or to mount a read-only filesystem"
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_store_and_directories_are_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask must not matter
    try:
        db = tmp_path / "a" / "b" / "store.db"
        with PodStore.open(db) as store:
            store.insert("p", "c", "r", {0: ["d"]}, b"")
            assert _mode(db) == 0o600
            for side in ("-wal", "-shm"):
                assert _mode(Path(str(db) + side)) == 0o600, side
        assert _mode(tmp_path / "a") == 0o700
        assert _mode(tmp_path / "a" / "b") == 0o700
    finally:
        os.umask(old)


def test_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    with PodStore.open(tmp_path / "store.db"):
        pass
    assert _mode(tmp_path) == 0o755
    assert _mode(tmp_path / "store.db") == 0o600


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_store_writable_by_others_warns(tmp_path: Path, mode: int) -> None:
    db = tmp_path / "store.db"
    PodStore.open(db).close()
    db.chmod(mode)
    for readonly in (False, True):
        with pytest.warns(UserWarning, match="writable by other users") as caught:
            PodStore.open(db, readonly=readonly).close()
        # attributed to the caller, not to podstore's internals
        assert caught[0].filename == __file__


def test_private_store_does_not_warn(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    db = tmp_path / "store.db"
    PodStore.open(db).close()
    PodStore.open(db).close()
    assert not [w for w in recwarn if "writable" in str(w.message)]


# ---- read-only opens --------------------------------------------------------------------------


def _probe(db: Path, *, as_nobody: bool) -> dict[str, Any]:
    argv = [*script("readonly_probe.py"), str(db)] + (["--as-nobody"] if as_nobody else [])
    env = dict(os.environ)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _assert_read_only(result: dict[str, Any], pods: list[str]) -> None:
    assert "open_error" not in result, result
    assert result["pods"] == pods
    assert result["writes"] == dict.fromkeys(result["writes"], "ReadOnlyStoreError"), result
    assert result["pods_after"] == pods
    assert result["writable_open"] == "ReadOnlyStoreError", result


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A directory nobody can enter but not write (root-owned, 0755), under a world-
    traversable parent (pytest's tmp_path is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="podstore-ro-", dir="/tmp"))
    try:
        base.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _give_to_nobody(directory: Path) -> None:
    for f in directory.iterdir():
        os.chown(f, NOBODY, NOBODY)
        f.chmod(0o400)
    directory.chmod(0o755)  # owned by root: nobody may read, not write


def _fill(db: Path) -> PodStore:
    store = PodStore.open(db)
    store.insert("p1", "c", "example.com/gpu", {0: ["d1"]}, b"")
    store.insert("p2", "c", "example.com/gpu", {1: ["d2"]}, b"")
    return store


@needs_root
def test_readonly_open_of_read_only_file_in_read_only_directory(nobody_dir: Path) -> None:
    db = nobody_dir / "store.db"
    _fill(db).close()  # a clean close: no -wal, no -shm
    _give_to_nobody(nobody_dir)
    _assert_read_only(_probe(db, as_nobody=True), ["p1", "p2"])
    assert sorted(p.name for p in nobody_dir.iterdir()) == ["store.db"]


@needs_root
def test_readonly_open_sees_a_live_writers_wal(nobody_dir: Path) -> None:
    """With a writer's -wal and -shm present, a read-only reader (no write access anywhere)
    must see the committed state in the WAL, not the stale main file."""
    db = nobody_dir / "store.db"
    store = _fill(db)
    try:
        with store.transaction():
            store.insert("p3", "c", "example.com/gpu", {0: ["d3"]}, b"")
        assert Path(str(db) + "-wal").stat().st_size > 0
        _give_to_nobody(nobody_dir)
        _assert_read_only(_probe(db, as_nobody=True), ["p1", "p2", "p3"])
    finally:
        store.close()


@pytest.fixture
def ro_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(writable dir, the same dir bind-mounted read-only)."""
    if not ROOT:
        pytest.skip("needs root to bind-mount a directory read-only")
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True
        ).returncode:
            pytest.skip("cannot remount read-only here")
        yield src, ro
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)


def test_readonly_open_on_a_read_only_mount(ro_mount: tuple[Path, Path]) -> None:
    src, ro = ro_mount
    _fill(src / "store.db").close()
    _assert_read_only(_probe(ro / "store.db", as_nobody=False), ["p1", "p2"])


def test_readonly_open_refuses_a_wal_it_cannot_use(ro_mount: tuple[Path, Path]) -> None:
    """A -wal with commits but no -shm, on a read-only mount: SQLite could only open it
    immutable, which ignores the WAL and would show an old state. podstore refuses instead."""
    src, ro = ro_mount
    store = _fill(src / "live.db")
    try:
        store.insert("p3", "c", "example.com/gpu", {0: ["d3"]}, b"")
        shutil.copy(src / "live.db", src / "store.db")
        shutil.copy(src / "live.db-wal", src / "store.db-wal")
    finally:
        store.close()
    assert (src / "store.db-wal").stat().st_size > 0
    result = _probe(ro / "store.db", as_nobody=False)
    assert result.get("open_error", "").startswith("ReadOnlyStoreError"), result


def test_readonly_store_refuses_writes_in_process(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    _fill(db).close()
    with PodStore.open(db, readonly=True) as store:
        before = store.to_checkpoint_data()
        with pytest.raises(ReadOnlyStoreError):
            store.insert("x", "c", "r", None, b"")
        with pytest.raises(ReadOnlyStoreError), store.transaction():
            pass
        with pytest.raises(ReadOnlyStoreError):
            store.delete(["p1"])
        assert store.to_checkpoint_data() == before
        out = tmp_path / "export" / "ckpt"
        if _checkpoint_module_ready():
            out.parent.mkdir()
            store.export_checkpoint(out)  # reading the store to another file is fine
            with pytest.raises(ReadOnlyStoreError):
                store.import_checkpoint(out)


# ---- no SQL built from user values ------------------------------------------------------------


def _checkpoint_module_ready() -> bool:
    try:
        import podstore.checkpoint as ck
    except ImportError:
        return False
    return all(hasattr(ck, n) for n in ("read_checkpoint", "dumps_checkpoint"))


MARK = "MRKq7z"


def _m(n: int) -> str:
    # quotes, a comment, a statement break and a LIKE wildcard: formatting would break on these
    return f"{MARK}{n}'\"; DROP TABLE pods; -- %_"


def test_user_values_never_appear_in_sql_text(tmp_path: Path) -> None:
    """Every public method runs with marker values while every statement podstore sends to
    SQLite is recorded (as passed to the driver, before SQLite binds anything): no marker may
    be part of any SQL text — user values travel only as bound parameters."""
    db = tmp_path / "store.db"
    resp = ContainerAllocateResponse()
    resp.envs[_m(20)] = _m(21)
    resp.annotations[_m(22)] = _m(23)
    with recording() as rec:
        store = PodStore.open(db)
        store.insert(_m(1), _m(2), _m(3), {0: [_m(4), _m(5)], -1: [_m(4)]}, resp)
        store.insert(_m(1), _m(6), _m(3), {1: [_m(7)]}, resp.SerializeToString())
        with store.transaction():
            store.insert(_m(8), _m(2), _m(9), {0: [_m(10)]}, None)
            store.delete([_m(11)])
        store.from_checkpoint_data(
            [PodDevicesEntry(_m(12), _m(13), _m(3), {0: [_m(14)]}, b"")]
            + [PodDevicesEntry(_m(15), f"c{i}", _m(3), {0: [_m(16)]}, None) for i in range(70)]
        )
        store.set_registered_devices({_m(3): [_m(4), _m(17)], _m(9): None})
        assert _m(1) in store.pods() and store.has_pod(_m(1)) and _m(1) in store
        assert store.size() == len(store) == 4
        assert store.container_devices(_m(1), _m(2), _m(3)) == {_m(4), _m(5)}
        assert store.pod_devices(_m(1), _m(3)) == {_m(4), _m(5), _m(7)}
        acc: dict[str, set[str]] = {_m(3): {_m(18), _m(4)}}
        store.add_container_allocated_resources(_m(1), _m(2), acc)
        assert acc[_m(3)] == {_m(4), _m(5), _m(18)}
        store.remove_container_allocated_resources(_m(1), _m(2), acc)
        assert acc[_m(3)] == {_m(18)}
        assert _m(3) in store.devices()
        assert store.get_container_devices(_m(1), _m(2)) is not None
        assert store.get_pod_and_container_for_device(_m(4)) == (_m(1), _m(2))
        assert store.get_pod_and_container_for_device(_m(4), _m(3)) == (_m(1), _m(2))
        opts = store.device_run_container_options(_m(1), _m(2), cdi_annotations=True)
        assert opts is not None
        assert len(store.to_checkpoint_data()) >= 3
        assert set(store.registered_devices()) == {_m(3), _m(9)}
        store.stats()
        if _checkpoint_module_ready():
            out = tmp_path / "ckpt"
            store.export_checkpoint(out, boot_id=_m(19))
            store.import_checkpoint(out, merge=True)
        store.delete([_m(1), _m(8)])
        store.close()
    statements = rec.statements()
    assert len(statements) > 50
    leaked = [s for s in statements if MARK in s]
    assert not leaked, leaked[:3]
    with PodStore.open(db) as store:  # and, of course, nothing was dropped
        assert _m(12) in store.pods()
