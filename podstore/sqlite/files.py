"""The store file on disk: created 0600 in 0700 directories, fsynced into its parent, and a
warning when others may write it."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import sys
import warnings
from urllib.parse import quote

from podstore.errors import (
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
    SchemaError,
    StoreFullError,
)
from podstore.fsutil import fsync_directory


def prepare_file(path: str) -> None:
    """Create the database file 0600 (missing parents 0700), fsynced into its parent (SQLite
    syncs the directory only for its journal and WAL). Raises ReadOnlyStoreError when the
    file or directory is not writable, StoreFullError when the disk is full.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        _make_private_dirs(parent)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            _check_regular(path, os.stat(path).st_mode)
            # A writable open needs the file and its directory (for -wal and -shm) writable.
            targets = [(path, "file")]
            if not all(os.path.exists(path + suffix) for suffix in ("-wal", "-shm")):
                targets.append((parent, "directory"))
            for target, what in targets:
                if not os.access(target, os.W_OK):
                    raise ReadOnlyStoreError(
                        f"the database {what} {target} is not writable; open it with readonly=True"
                    ) from None
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(parent)
    except OSError as exc:
        raise _os_error(exc, path) from None


def check_readable_store_file(path: str) -> None:
    """Check, creating nothing, that a read-only open finds a non-empty regular file: raises
    InvalidInputError for a missing path or another kind of file (SQLite would read
    /dev/null as an empty database), SchemaError for an empty file.
    """
    full = os.path.abspath(path)
    try:
        st = os.stat(full)
    except FileNotFoundError:
        raise InvalidInputError(f"database: {path} does not exist (opened read-only)") from None
    except OSError as exc:
        raise _os_error(exc, full, "open") from None
    _check_regular(path, st.st_mode)
    # A new store's pages may all be in its WAL still.
    if st.st_size == 0 and wal_size(full) == 0:
        raise SchemaError(f"database: {path} is an empty file, not a podstore store")


def _check_regular(shown: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise InvalidInputError(f"database: {shown} is not a regular file")


def _make_private_dirs(directory: str) -> None:
    """os.makedirs with every created level 0700 (not only the last), each fsynced."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent != directory:
        _make_private_dirs(parent)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)  # the umask may have taken bits away, never added them
    fsync_directory(parent)


def _os_error(exc: OSError, path: str, action: str = "create") -> PodStoreError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"cannot {action} {path}: the disk is full ({exc.strerror})")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ReadOnlyStoreError(f"cannot {action} {path}: {exc.strerror}")
    return PodStoreError(f"cannot {action} {path}: {exc.strerror or exc}")


def warn_if_writable_by_others(path: str) -> None:
    """UserWarning (at the caller outside podstore) when others may write the file or WAL."""
    for candidate in (path, path + "-wal"):
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) and mode & (stat.S_IWOTH | stat.S_IWGRP):
            warnings.warn(
                f"{candidate} is writable by other users (mode {stat.S_IMODE(mode):o}); anyone "
                "with that access can rewrite the node's device allocations",
                stacklevel=_caller_stacklevel(),
            )
            return


def _caller_stacklevel() -> int:
    """The warnings stacklevel of the first frame outside the podstore package."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package_dir + os.sep
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def wal_size(path: str) -> int:
    """Bytes in the store's write-ahead log (``path-wal``); 0 when there is none."""
    try:
        return os.path.getsize(path + "-wal")
    except FileNotFoundError:
        return 0


def release_side_files(path: str) -> None:
    """Remove the empty ``-wal`` and ``-shm`` a read-only store made SQLite create, when no
    process has the store open.

    Only a writable connection's last close removes them, so one reads a row and closes:
    SQLite takes the exclusive lock (only if nobody else has the file open) and deletes both.
    Nothing is done when the log holds frames (a writer's to checkpoint) or when the file or
    its directory is not writable.
    """
    full = os.path.abspath(path)
    try:
        if os.path.getsize(full + "-wal") != 0:
            return
    except FileNotFoundError:
        if not os.path.exists(full + "-shm"):
            return
    except OSError:
        return
    if not (os.access(full, os.W_OK) and os.access(os.path.dirname(full), os.W_OK)):
        return
    try:
        conn = sqlite3.connect(  # mode=rw: never create the store if it went away meanwhile
            "file:" + quote(full) + "?mode=rw", uri=True, timeout=0, isolation_level=None
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:  # busy, gone, not ours: the files stay, as SQLite left them
        pass
