"""Device spans (revision 0006; docs/sql.md): an entry's device lists and their history in one
table, so an insert writes each device once (separate device and event rows cost two random
index pages per device). An allocation id is never reused, so a deleted entry's spans never mix
with a later one's.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from podstore.storage.sql import entries as sql
from podstore.types import DevicesPerNUMA

#: An ``allocation_device_spans`` row as INSERT_SPAN takes it.
SpanRow = tuple[int, int, int, int, str]
#: An ``empty_numa_lists`` row: allocation id, NUMA node, is null.
EmptyRow = tuple[int, int, bool]


def opened(
    allocation_id: int, seq: int, devices: DevicesPerNUMA | None
) -> tuple[list[SpanRow], list[EmptyRow]]:
    """The spans event ``seq`` opens for an entry's NUMA map, and the markers of its NUMA nodes
    whose list is ``[]`` or ``null`` (which would otherwise leave no trace)."""
    spans: list[SpanRow] = []
    empty: list[EmptyRow] = []
    if devices:
        for node, ids in devices.items():
            if ids:
                spans += [(allocation_id, seq, node, pos, dev) for pos, dev in enumerate(ids)]
            else:
                empty.append((allocation_id, node, ids is None))
    return spans, empty


def ending(
    seq: int, released: Iterable[str] | None, allocation_id: int
) -> tuple[int, str | None, int]:
    """CLOSE_SPANS parameters: event ``seq`` ends the entry's open spans, ``released`` as
    released and the others as listed (None: naming none)."""
    if released is None:
        return (seq, None, allocation_id)
    return (seq, json.dumps([d.encode("utf-8").hex().upper() for d in released]), allocation_id)


def write(conn: sqlite3.Connection, spans: list[SpanRow], empty: list[EmptyRow]) -> None:
    if spans:
        conn.executemany(sql.INSERT_SPAN, spans)
    if empty:
        conn.executemany(sql.INSERT_EMPTY_LIST, empty)
