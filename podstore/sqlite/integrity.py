"""The open-time integrity checks (``PodStore.open(verify=...)``).

Two depths:

- :func:`quick_check`, SQLite's ``PRAGMA quick_check``: every page of the file is read and
  every B-tree, record and freelist checked. Linear in the file (about 1.5 ms per MB).
- :func:`structural_check`: what can be checked without reading the file — the 100-byte
  header against the file's size, the schema table, and the root page of every table and
  index (present, and a B-tree page of the right kind). A millisecond at any size.

:func:`crash_evidence` tells which one an open needs at least: a store whose last connection
closed cleanly has no ``-wal`` left (SQLite checkpoints it into the main file and deletes it),
so a ``-wal`` holding bytes means a process crashed (or still has the store open) and
anything the log or an interrupted checkpoint wrote may be torn. docs/reliability.md, "What
is checked at open, and when", is the contract.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from podstore.errors import StoreCorruptError
from podstore.sqlite import posixlocks
from podstore.sqlite.connection import ImmutableConnection
from podstore.sqlite.translate import translated_errors

_MAGIC = b"SQLite format 3\x00"
# B-tree page kinds (the first byte of a page's B-tree header).
_INDEX_PAGES = (0x02, 0x0A)  # interior, leaf: indexes and WITHOUT ROWID tables
_TABLE_PAGES = (0x05, 0x0D)  # interior, leaf: rowid tables


def quick_check(conn: sqlite3.Connection) -> None:
    """Raise StoreCorruptError unless ``PRAGMA quick_check`` finds the file sound.

    A damaged page otherwise goes unnoticed until a query happens to read it (an index page,
    say, is read only by some look-ups), and a write that reuses a page the damage made look
    free spreads it. tests/test_reliability_damage.py pins it.
    """
    with translated_errors():
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    if rows != ["ok"]:
        raise StoreCorruptError("the database file is damaged: " + "; ".join(rows))


def crash_evidence(path: str) -> bool:
    """True when ``path`` has a ``-wal`` holding bytes: the last close was not clean, or
    another connection has the store open. Call it before opening a connection (podstore's
    own last close would checkpoint and delete the log)."""
    try:
        return os.path.getsize(path + "-wal") > 0
    except OSError:
        return False


def _damaged(path: str, what: str) -> StoreCorruptError:
    return StoreCorruptError(f"the database file is damaged: {path}: {what}")


def structural_check(path: str) -> bool:
    """Raise StoreCorruptError unless the header, the schema and every root page look sound;
    False when it could not look, and SQLite's own check must be run instead.

    Meant for a file without a ``-wal`` (see :func:`crash_evidence`): then the main file alone
    is the database, and its size must agree with the header; an empty (new) file passes.

    It reads the file's bytes itself, and closing a descriptor of a file drops every POSIX
    lock the process holds on it (sqlite/posixlocks.py): so it looks only when the process
    holds none — it has no other connection to the file — and answers False otherwise. The
    schema is read through an ``immutable=1`` connection, which reads the main file alone and
    takes no lock (and SQLite defers the close of its descriptor while any is held).
    """
    if posixlocks.holds_locks(path):
        return False
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = f.read(100)
            if size == 0:
                return True
            if len(header) < 100 or header[:16] != _MAGIC:
                raise _damaged(path, "not an SQLite database header")
            page_size = int.from_bytes(header[16:18], "big")
            page_size = 65536 if page_size == 1 else page_size
            if page_size < 512 or page_size & (page_size - 1):
                raise _damaged(path, f"page size {page_size} in the header")
            if size % page_size:
                raise _damaged(path, f"size {size} is not a whole number of {page_size}-byte pages")
            pages = size // page_size
            in_header = int.from_bytes(header[28:32], "big")
            # The header's page count is valid when its version-valid-for number matches the
            # change counter (https://sqlite.org/fileformat2.html#in_header_database_size).
            if header[92:96] == header[24:28] and in_header != pages:
                raise _damaged(path, f"header says {in_header} pages, the file has {pages}")
            freelist_trunk = int.from_bytes(header[32:36], "big")
            freelist_count = int.from_bytes(header[36:40], "big")
            if freelist_trunk > pages or freelist_count >= pages:
                raise _damaged(path, "the freelist points outside the file")
            if (
                header[21:24] != b"\x40\x20\x20"
                or header[18] not in (1, 2)
                or header[19]
                not in (
                    1,
                    2,
                )
            ):
                raise _damaged(path, "header fields out of range")
            for kind, name, root, sql in _roots(path):
                if not 1 <= int(root) <= pages:
                    raise _damaged(path, f"{kind} {name}: root page {root} outside the file")
                f.seek((int(root) - 1) * page_size + (100 if root == 1 else 0))
                page_kind = f.read(1)[:1]
                clustered = kind == "index" or "WITHOUT ROWID" in str(sql or "").upper()
                wanted = _INDEX_PAGES if clustered else _TABLE_PAGES
                if not page_kind or page_kind[0] not in wanted:
                    raise _damaged(path, f"{kind} {name}: root page {root} is not a B-tree page")
    except OSError as exc:
        raise StoreCorruptError(f"cannot read {path}: {exc}") from None
    return True


def _roots(path: str) -> list[tuple[str, str, int, str | None]]:
    """(type, name, root page, sql) of every table and index, read from the main file alone."""
    uri = "file:" + quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
    with translated_errors():
        # The ImmutableConnection factory also keeps it out of the statement recorders of
        # the test harnesses, which replay every connection as a writable one.
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, factory=ImmutableConnection)
        try:
            return conn.execute(
                "SELECT type, name, rootpage, sql FROM sqlite_master "
                "WHERE type IN ('table', 'index') AND rootpage > 0"
            ).fetchall()
        finally:
            conn.close()
