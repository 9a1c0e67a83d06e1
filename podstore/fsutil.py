"""File-system durability helpers shared by the store, the checkpoint writer and the metrics
textfile."""

from __future__ import annotations

import contextlib
import errno
import os


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or a new file in it survives power loss (passed over
    where the file system cannot: there the rename is as durable as it gets)."""
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def replace_file(
    path: str | os.PathLike[str], data: bytes | bytearray | memoryview, mode: int
) -> None:
    """Replace the file at ``path`` with ``data`` atomically and durably, with ``mode``: a
    crash leaves the old or the new file, an error no temporary file. Raises OSError."""
    target = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(target)
    # Imported here: tempfile brings random, shutil, … (almost 1 MiB) into every command, and
    # only writers of whole files need it.
    import tempfile

    # ".name.XXX.tmp": kubelet's checkpoint listing and node_exporter's *.prom glob skip it.
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        try:
            os.fchmod(fd, mode)  # exact, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        tmp = ""
        fsync_directory(directory)
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
