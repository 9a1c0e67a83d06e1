"""Device spans (revision 0006; docs/sql.md): an entry's device lists and their history in one
table, so an insert writes each device once (separate device and event rows cost two random
index pages per device). An allocation id is never reused, so a deleted entry's spans never mix
with a later one's.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from podstore.storage.rows import DeviceRow, EmptyRow
from podstore.storage.sql import entries as sql


def ending(
    seq: int, released: Iterable[str] | None, allocation_id: int
) -> tuple[int, str | None, int]:
    """CLOSE_SPANS parameters: event ``seq`` ends the entry's open spans, ``released`` as
    released and the others as listed (None: naming none)."""
    if released is None:
        return (seq, None, allocation_id)
    return (seq, json.dumps([d.encode("utf-8").hex().upper() for d in released]), allocation_id)


def write(conn: sqlite3.Connection, spans: list[DeviceRow], empty: list[EmptyRow]) -> None:
    if spans:
        conn.executemany(sql.INSERT_SPAN, spans)
    if empty:
        conn.executemany(sql.INSERT_EMPTY_LIST, empty)
