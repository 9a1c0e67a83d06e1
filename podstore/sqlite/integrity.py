"""The open-time integrity check (docs/reliability.md, "What is checked at open, and when"):
``PRAGMA quick_check`` reads every page (about 1.5 ms per MB); it runs before the open returns
when a non-empty ``-wal`` shows an unclean close (a clean last close deletes it).
"""

from __future__ import annotations

import os
import sqlite3

from podstore.errors import StoreCorruptError
from podstore.sqlite.translate import translated_errors


def quick_check(conn: sqlite3.Connection) -> None:
    """Raise StoreCorruptError unless ``PRAGMA quick_check`` finds the file sound (else a
    damaged page shows only when read, and a write reusing a page it made look free spreads
    it)."""
    with translated_errors():
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    if rows != ["ok"]:
        raise StoreCorruptError("the database file is damaged: " + "; ".join(rows))


def crash_evidence(path: str) -> bool:
    """True when ``path`` has a non-empty ``-wal`` (an unclean close, or open elsewhere); call
    it before connecting."""
    try:
        return os.path.getsize(path + "-wal") > 0
    except OSError:
        return False
