"""File-system durability helpers shared by the store and the checkpoint writer."""

from __future__ import annotations

import errno
import os


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or a new file in it survives power loss.

    File systems that cannot fsync a directory (EINVAL/ENOTSUP) are passed over: there the
    rename is as durable as it gets.
    """
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
