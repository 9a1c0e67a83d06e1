"""``PodStore.reader()``: a read-only snapshot on a guarded connection of its own
(``sqlite/readonly.py``), with optional limits, whose statements stream a page at a time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, TypeVar

from podstore.errors import PodStoreError
from podstore.pure import validate
from podstore.pure.times import TimeArg, format_ts, parse_time
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.readonly import Guarded, Limits, Params, RowStream
from podstore.storage import audit, events
from podstore.storage import entries as entry_store
from podstore.storage.sql import audit as audit_sql
from podstore.storage.sql import events as events_sql
from podstore.storage.sql import ship as ship_sql
from podstore.types import AllocationEvent, DeviceHolding, DeviceOwner, PodSummary

T = TypeVar("T")

#: A history row as shipping sends it: (seq, ts, op, pod_uid, container, resource, device_ids,
#: released, hash) — the fields the chain covers, as stored, and the event's hash.
EventRow = tuple[int, str, str, str | None, str | None, str, str | None, str | None, bytes]
#: An entry of the current state: (pod_uid, container, resource, NUMA map as stored JSON).
StateEntry = tuple[str, str, str, str | None]
#: An item of the node's other managers, topology or pod names: (family, pod_uid, container,
#: resource, payload JSON as its latest event carries it).
NodeItem = tuple[str, str | None, str | None, str, str | None]


def history_query(
    pod_uid: str | None = None,
    device_id: str | None = None,
    since: TimeArg | None = None,
    until: TimeArg | None = None,
) -> tuple[str, dict[str, str]]:
    """The history statement and parameters for these filters; InvalidInputError if bad."""
    params: dict[str, str] = {}
    if pod_uid is not None:
        params["pod_uid"] = validate.text(pod_uid, "pod_uid")
    if device_id is not None:
        params["device_id"] = validate.text(device_id, "device_id")
    if since is not None:
        params["since"] = parse_time(since, "since")
    if until is not None:
        params["until"] = parse_time(until, "until")
    return events_sql.history_sql(params), params


class Reader:
    """A read-only snapshot of a store (``PodStore.reader``); use it in ``with``, from one
    thread at a time."""

    def __init__(self, options: ConnectOptions, limits: Limits, *, snapshot: bool = True) -> None:
        self._guarded = Guarded(options, limits, snapshot=snapshot)

    def stream(self, sql: str, params: Params = None) -> RowStream[tuple[Any, ...]]:
        """The rows of one read-only statement, streamed; raises as ``PodStore.stream``."""
        return self._guarded.rows(sql, params)

    def history(
        self,
        pod_uid: str | None = None,
        device_id: str | None = None,
        since: TimeArg | None = None,
        until: TimeArg | None = None,
    ) -> RowStream[AllocationEvent]:
        """``PodStore.history`` streamed."""
        sql, params = history_query(pod_uid, device_id, since, until)
        return self._guarded.rows(sql, params).mapped(events.to_event)

    def pods(self) -> RowStream[PodSummary]:
        """Every pod in uid order (``podstore pods``)."""
        return self._guarded.rows(audit_sql.PODS).mapped(audit.pod_summary)

    def devices(self, resource: str | None = None) -> Iterator[DeviceHolding]:
        """Every held device per holder, then the registered ones nobody holds, by resource and
        id (``podstore devices``), streamed. Raises InvalidInputError for a bad argument."""
        if resource is not None:
            resource = validate.text(resource, "resource")
        return audit.device_holdings(self._guarded.rows, resource)

    def owners(self, device_id: str) -> RowStream[DeviceOwner]:
        """The containers holding ``device_id`` now, sorted; InvalidInputError if bad."""
        device = validate.text(device_id, "device_id")
        return self._guarded.rows(audit_sql.OWNERS_NOW, {"device": device}).mapped(
            audit.device_owner
        )

    def containers(self, pod_uid: str) -> RowStream[str]:
        """``pod_uid``'s container names, sorted; InvalidInputError if bad."""
        pod = validate.text(pod_uid, "pod_uid")
        return self._guarded.rows(audit_sql.CONTAINERS_OF_POD, (pod,)).mapped(itemgetter(0))

    # ---- what shipping reads (podstore.fleet.ship), all from this one snapshot ----------------

    def high_water(self) -> int:
        """The newest seq ever handed out (0: none); a missing one below it was pruned."""
        return int(self._fetch(ship_sql.HIGH_WATER, ())[0][0])

    def events_after(self, after: int, limit: int) -> list[EventRow]:
        """Up to ``limit`` events after seq ``after``, oldest first (EventRow)."""
        return [_event_row(r) for r in self._fetch(ship_sql.EVENTS_AFTER, (after, limit))]

    def events_between(self, after: int, through: int) -> list[EventRow]:
        """Every kept event after seq ``after`` up to ``through``, oldest first (EventRow)."""
        return [_event_row(r) for r in self._fetch(ship_sql.EVENTS_BETWEEN, (after, through))]

    def clock(self) -> str:
        """The history clock's time now, in stored form (what a snapshot is stamped with)."""
        return format_ts(events.utcnow())

    def first_ts_after(self, seq: int) -> str | None:
        """The stored time of the oldest kept event after ``seq`` (None: none)."""
        rows = self._fetch(ship_sql.EVENTS_AFTER, (seq, 1))
        return str(rows[0][1]) if rows else None

    def oldest_ts_after(self, seq: int) -> str | None:
        """The earliest stored time of the kept events after ``seq``, by time (None: none)."""
        rows = self._fetch(ship_sql.OLDEST_TS_AFTER, (seq,))
        return None if rows[0][0] is None else str(rows[0][0])

    def chain_prev(self, seq: int) -> bytes:
        """The hash event ``seq`` chains from; StoreCorruptError when none is there."""
        return self._call(lambda conn: events.prev_hash(conn, seq))

    def chain_head(self) -> tuple[int, bytes]:
        """The newest seq ever handed out and the hash the chain stands at there."""
        return self._call(events.head)

    def current_state(self) -> tuple[list[StateEntry], list[tuple[str, str | None]]]:
        """The entries (NUMA maps as the history stores them) and registered device lists
        (JSON; None: null) a fleet snapshot is made of."""

        def read(conn: Any) -> tuple[list[StateEntry], list[tuple[str, str | None]]]:
            entries = [
                (e.pod_uid, e.container_name, e.resource_name, events.numa_json(e.device_ids))
                for e in entry_store.read_entries(conn)
            ]
            registered = [
                (resource, None if ids is None else events.JSON.encode(list(ids)))
                for resource, ids in entry_store.current_registered(conn).items()
            ]
            return entries, registered

        return self._call(read)

    def node_items(self) -> list[NodeItem]:
        """The other managers', topology's and names' items a fleet snapshot holds."""
        from podstore.storage.node import sync as node_sync  # not for other readers

        return self._call(node_sync.current_items)

    def physical_facts(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The CDI devices' host nodes (spec_path, name, host_path) and what each entry's
        response names (pod_uid, container, resource, 'host' | 'cdi', value): the facts the
        physical identity is computed from, which a ship sends beside the events."""

        def read(conn: sqlite3.Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            return (
                conn.execute(ship_sql.PHYSICAL_CDI).fetchall(),
                conn.execute(ship_sql.PHYSICAL_RESPONSES).fetchall(),
            )

        return self._call(read)

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._call(lambda conn: conn.execute(sql, params).fetchall())

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._guarded.conn
        if conn is None:
            raise PodStoreError("the reader is closed")
        return self._guarded.call(lambda: fn(conn))

    def close(self) -> None:
        """End the snapshot and close its connection (open streams end too)."""
        self._guarded.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _event_row(row: tuple[Any, ...]) -> EventRow:
    seq, ts, op, pod, container, resource, ids, released, digest = row
    return (int(seq), ts, op, pod, container, resource, ids, released, bytes(digest))
