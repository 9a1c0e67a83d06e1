"""The open-time integrity check (``PodStore.open(verify=...)``): ``PRAGMA quick_check``."""

from __future__ import annotations

import sqlite3

from podstore.errors import StoreCorruptError
from podstore.sqlite.translate import translated_errors


def quick_check(conn: sqlite3.Connection) -> None:
    """Raise StoreCorruptError unless ``PRAGMA quick_check`` finds the file sound.

    Run on every open: a damaged page otherwise goes unnoticed until a query happens to read
    it (an index page, say, is read only by some look-ups), and a node agent must learn at
    start, not halfway through an allocation. It reads every page once (about 1 ms per MB;
    docs/reliability.md has figures); tests/test_reliability_damage.py pins it.
    """
    with translated_errors():
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    if rows != ["ok"]:
        raise StoreCorruptError("the database file is damaged: " + "; ".join(rows))
