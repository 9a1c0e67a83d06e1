"""write_checkpoint_file replaces the file atomically, with mode 0600, leaving nothing behind."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podstore.checkpoint import dumps_checkpoint, read_checkpoint, write_checkpoint_file
from podstore.errors import CheckpointError, InvalidInputError
from podstore.types import PodDevicesEntry as E

DATA = dumps_checkpoint([E("p", "c", "r", {0: ["a"]}, b"\x01")], {"r": ["a"]})
NOBODY = 65534


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_the_bytes_with_mode_0600(tmp_path: Path, umask: None) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    write_checkpoint_file(path, DATA)
    assert path.read_bytes() == DATA
    assert _mode(path) == 0o600
    assert os.listdir(tmp_path) == ["kubelet_internal_checkpoint"]
    assert read_checkpoint(path).entries[0].pod_uid == "p"


@pytest.mark.parametrize("mask", [0o000, 0o077, 0o277])
def test_mode_is_0600_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        write_checkpoint_file(tmp_path / "cp", DATA)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "cp") == 0o600


def test_overwrites_an_existing_file(tmp_path: Path, umask: None) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"old contents that are longer than the new ones" * 100)
    path.chmod(0o644)
    inode = path.stat().st_ino
    write_checkpoint_file(str(path), DATA)
    assert path.read_bytes() == DATA
    assert _mode(path) == 0o600
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["cp"]


def test_accepts_bytearray_and_empty_data(tmp_path: Path) -> None:
    write_checkpoint_file(tmp_path / "a", bytearray(DATA))
    assert (tmp_path / "a").read_bytes() == DATA
    write_checkpoint_file(tmp_path / "b", b"")
    assert (tmp_path / "b").read_bytes() == b""


def test_large_data_is_written_completely(tmp_path: Path) -> None:
    data = os.urandom(8 * 1024 * 1024 + 3)
    write_checkpoint_file(tmp_path / "big", data)
    assert (tmp_path / "big").read_bytes() == data


def test_temporary_file_is_hidden_and_removed_on_failure(tmp_path: Path) -> None:
    # A directory at the target makes the final rename fail after the data was written.
    target = tmp_path / "cp"
    target.mkdir()
    with pytest.raises(CheckpointError, match="cannot write checkpoint") as info:
        write_checkpoint_file(target, DATA)
    assert isinstance(info.value.__cause__, OSError)
    assert os.listdir(tmp_path) == ["cp"]
    assert os.listdir(target) == []


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        write_checkpoint_file(tmp_path / "missing" / "cp", DATA)
    assert os.listdir(tmp_path) == []


def _write_as_nobody(directory: Path) -> str:
    """Try the write in a forked child that has dropped to ``nobody`` (root ignores directory
    permissions, and CI runs as root); the child reports what happened over a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's outcome is what the parent asserts
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            write_checkpoint_file(directory / "cp", DATA)
            outcome = "written"
        except CheckpointError as exc:
            outcome = f"CheckpointError: {exc}"
        except BaseException as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        outcome = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return outcome


def test_read_only_directory_is_an_error(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        tmp_path.chmod(0o500)
        try:
            with pytest.raises(CheckpointError, match="Permission denied"):
                write_checkpoint_file(tmp_path / "cp", DATA)
        finally:
            tmp_path.chmod(0o700)
        assert os.listdir(tmp_path) == []
        return
    # As root: a directory nobody may enter but not write, under a parent nobody may
    # traverse (pytest's tmp_path is 0700).
    base = Path(tempfile.mkdtemp(prefix="podstore-cp-", dir="/tmp"))
    try:
        base.chmod(0o755)
        target = base / "ro"
        target.mkdir()
        os.chown(target, NOBODY, NOBODY)
        target.chmod(0o500)
        outcome = _write_as_nobody(target)
        assert outcome.startswith("CheckpointError") and "Permission denied" in outcome, outcome
        assert os.listdir(target) == []
        # the same directory made writable for nobody: the write goes through (so the
        # refusal above was the permission, not the dropped privileges themselves)
        target.chmod(0o700)
        assert _write_as_nobody(target) == "written"
        assert (target / "cp").read_bytes() == DATA
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_data_must_be_bytes(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        write_checkpoint_file(tmp_path / "cp", "text")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_relative_path_is_written_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_checkpoint_file("cp", DATA)
    assert (tmp_path / "cp").read_bytes() == DATA
    assert os.listdir(tmp_path) == ["cp"]
