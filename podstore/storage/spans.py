"""Device spans (revision 0006): an entry's device lists and their history in one table.

``allocation_device_spans`` (docs/sql.md) has one row per (NUMA node, list position) of every
device list an entry event wrote, open (``until_seq`` NULL) while the entry lists it. So an
insert writes each device once: the open spans are the entry's devices now
(``allocation_devices``), and the same rows, through the ``(device_id, until_seq)`` index, tell
which events named a device (``allocation_event_devices``). Writing device rows and event rows
separately cost two random index pages per device.

``until_released``: 0 the closing event lists the device (a ``delete``, or a rewrite listing
it again, which opens a new span); 1 it released it (a ``replace``/``import`` that no longer
lists it); NULL it does not name it (an entry a replacing import dropped and wrote anew). An
allocation id is never reused (``sql/entries.INSERT_ALLOCATION``), so a deleted entry's spans
never mix with a later one's. Closed spans stay until ``prune_history`` removed the events at
both their ends.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence

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
    whose list is empty or null (the store keeps ``[]`` and ``null`` apart, and a node with no
    devices would otherwise leave no trace)."""
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
    """CLOSE_SPANS parameters: event ``seq`` ends the entry's open spans, naming the devices in
    ``released`` as released and the others as listed; None: naming none of them."""
    if released is None:
        return (seq, None, allocation_id)
    return (seq, json.dumps([d.encode("utf-8").hex().upper() for d in released]), allocation_id)


def close(
    conn: sqlite3.Connection, seq: int, released: Sequence[str] | None, allocation_id: int
) -> None:
    """End the entry's open spans at event ``seq`` (see :func:`ending`)."""
    conn.execute(sql.CLOSE_SPANS, ending(seq, released, allocation_id))


def write(conn: sqlite3.Connection, spans: list[SpanRow], empty: list[EmptyRow]) -> None:
    if spans:
        conn.executemany(sql.INSERT_SPAN, spans)
    if empty:
        conn.executemany(sql.INSERT_EMPTY_LIST, empty)
