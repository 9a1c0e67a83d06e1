"""A small tmpfs mounted for a test, to make a disk really fill up (root only)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_fs(where: Path, size: str = "8m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` at ``where`` (created) for the block; the test is skipped,
    saying why, when not root or when the container forbids mounts."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run the suite as root (CI does) to test this")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (container without CAP_SYS_ADMIN?): {done.stderr}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> int:
    """Write ``path`` until the disk is full; return its size."""
    chunk = b"\0" * 4096
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return path.stat().st_size
