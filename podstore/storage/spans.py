"""Device spans: an entry's device lists and their history in one table (revision 0006).

``allocation_device_spans`` holds one row per (NUMA node, list position) of every device list
an entry event wrote. ``since_seq`` is the event that listed the device; ``until_seq`` the event
that ended the list (NULL while the entry still lists it) and ``until_released`` how that
event names the device:

- 0: it lists it — a ``delete`` (which names what the entry held until it), or an event that
  writes the entry again and lists the device again (it also opens a new span);
- 1: it released it — a ``replace`` or ``import`` over the entry that no longer lists it;
- NULL: not at all — the entry a replacing import dropped and wrote anew as a new entry (the
  import's event names only what it lists).

So an insert writes each device once: the open spans are the entry's devices now (the
``allocation_devices`` view), and the same rows, through the index on ``(device_id,
until_seq)``, tell which events named a device (``allocation_event_devices``, the view that adds
``event_device_rows`` for events without spans). Round 2 wrote the device rows, then the same
devices again as event rows with an index of their own: two random index pages per device.

An entry keeps its allocation id for life, and a new entry takes an id no entry ever had (see
``sql/entries.INSERT_ALLOCATION``), so the spans of a deleted entry never mix with a later
one's. Closed spans stay until ``prune_history`` has removed the events at both their ends.
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
