"""An online copy of a store (``podstore migrate --backup FILE``): one consistent snapshot,
written beside FILE, made self-contained (no -wal), fsynced, then linked to its name, never
over an existing file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Callable

from podstore.errors import InvalidInputError
from podstore.fsutil import fsync_directory
from podstore.sqlite import forking
from podstore.sqlite.connection import ConnectOptions, connect
from podstore.sqlite.translate import translated_errors

#: Pages copied per backup step when progress is reported (4 MiB of 4 KiB pages).
STEP_PAGES = 1024


def online_backup(
    options: ConnectOptions, dest: str, progress: Callable[[int, int], None] | None = None
) -> int:
    """Copy the store to the new file ``dest`` (0600), calling ``progress(done, total)`` per
    step; returns the pages copied. Raises InvalidInputError when ``dest`` exists, what
    opening raises, ReadOnlyStoreError / StoreFullError when ``dest`` cannot be written.
    """
    target = os.path.abspath(dest)
    if os.path.lexists(target):
        raise InvalidInputError(f"backup: {dest} already exists; name a new file")
    directory = os.path.dirname(target)
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.backup")
    pages = 0
    with forking.activity(), translated_errors():
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            raise InvalidInputError(f"backup: cannot create {dest}: {exc.strerror}") from None

        def step(_status: int, remaining: int, total: int) -> None:
            nonlocal pages
            pages = total
            if progress is not None:
                progress(total - remaining, total)

        try:
            with (
                contextlib.closing(connect(dataclasses.replace(options, readonly=True))) as source,
                contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as copy,
            ):
                source.backup(copy, pages=STEP_PAGES if progress is not None else -1, progress=step)
                # A self-contained file: its content all in it, none in a -wal beside it.
                copy.execute("PRAGMA journal_mode = DELETE")
            fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, target)  # never replaces an existing file
            except FileExistsError:
                raise InvalidInputError(f"backup: {dest} already exists; name a new file") from None
            fsync_directory(directory)
        finally:
            for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
    return pages
