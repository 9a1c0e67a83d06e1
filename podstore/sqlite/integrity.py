"""The open-time integrity check (``PodStore.open(verify=...)``).

:func:`quick_check` is SQLite's ``PRAGMA quick_check``: every page of the file is read and
every B-tree, record and freelist checked, about 1.5 ms per MB. :func:`crash_evidence` tells
whether an open must run it before returning: a store whose last connection closed cleanly
has no ``-wal`` left (SQLite checkpoints it into the main file and deletes it), so a ``-wal``
holding bytes means a process crashed (or still has the store open) and anything the log or
an interrupted checkpoint wrote may be torn. Otherwise the check runs in the background and
every write waits for it. docs/reliability.md, "What is checked at open, and when", is the
contract.
"""

from __future__ import annotations

import os
import sqlite3

from podstore.errors import StoreCorruptError
from podstore.sqlite.translate import translated_errors


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
