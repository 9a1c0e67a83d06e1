"""sqlite3 errors as podstore's own: no raw ``sqlite3`` exception reaches a caller."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from podstore.errors import (
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreCorruptError,
    StoreFullError,
)

# IOERR subcodes of a write that did not reach the disk: ENOSPC while growing the WAL or -shm,
# or in a checkpoint, comes as one of these, not SQLITE_FULL (tests/test_reliability_diskfull.py).
_WRITE_IOERRS = ("WRITE", "FSYNC", "TRUNCATE", "SHMSIZE", "SHMMAP", "FALLOCATE", "DIR_FSYNC")
_FULL = (
    "the disk holding the store is full (or the store reached its size limit): the write "
    "was rolled back and the store is unchanged; free space on that filesystem, then retry "
    "(no reopen needed)"
)
# IOERR subcodes that mean stored bytes could not be read back.
_READ_IOERRS = ("READ", "SHORT_READ", "CORRUPTFS", "DATA")


def translate(exc: BaseException) -> PodStoreError | None:
    """The podstore error for a sqlite3 (or SQLAlchemy-wrapped) error, or None if not one:
    the specific subclass where the cause is known, else PodStoreError naming SQLite's code."""
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, sqlite3.Error):
        return None
    code = getattr(orig, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    ext = str(getattr(orig, "sqlite_errorname", "") or "")
    text = str(orig)
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text:
        return StoreBusyError(f"the database stayed locked past the busy timeout ({text})")
    if primary == sqlite3.SQLITE_FULL or "disk is full" in text:
        return StoreFullError(f"{_FULL} ({text})")
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in text:
        return StoreCorruptError(f"the database file is damaged: {text}")
    if primary == sqlite3.SQLITE_READONLY or "readonly database" in text:
        return ReadOnlyStoreError(f"the store is read-only: {text}")
    if primary == sqlite3.SQLITE_IOERR:
        sub = ext.removeprefix("SQLITE_IOERR_")
        if sub in _WRITE_IOERRS:
            return StoreFullError(f"a write to the database failed: {_FULL} ({text} [{ext}])")
        if sub in _READ_IOERRS:
            return StoreCorruptError(f"the database file could not be read: {text} [{ext}]")
        return PodStoreError(f"I/O error on the database: {text} [{ext}]")
    if primary == sqlite3.SQLITE_TOOBIG or "too big" in text:
        return InvalidInputError(f"a value is larger than SQLite can store: {text}")
    if primary == sqlite3.SQLITE_CANTOPEN:
        return PodStoreError(f"cannot open the database file: {text} [{ext}]")
    if isinstance(orig, sqlite3.ProgrammingError) and "closed" in text:
        return PodStoreError("the store is closed")
    return PodStoreError(f"SQLite error: {text}" + (f" [{ext}]" if ext else ""))


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise sqlite3 errors as podstore's, ``from None`` (a plain PodStoreError keeps the
    sqlite3 error as its cause, for debugging)."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, sqlite3.Error) and not isinstance(
            getattr(exc, "orig", None), sqlite3.Error
        ):
            raise
        mapped = translate(exc)
        if mapped is None:
            raise
        if type(mapped) is PodStoreError:
            raise mapped from exc
        raise mapped from None
