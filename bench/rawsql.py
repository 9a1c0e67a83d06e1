"""The raw ``sqlite3`` baseline: podstore's own statements on a plain stdlib connection.

"The same rows, the same SQL" is taken literally: every statement podstore runs for a call is
recorded once, untimed, on a scratch copy of the store (a :class:`Recorder` in place of the
store's connection), and the baseline replays that statement stream — same SQL text, same
parameters, same BEGIN IMMEDIATE / COMMIT — on its own copy of the file. The copies start
page-for-page equal and see the same sequence of changes, so ids and results agree. What the
baseline leaves out is exactly what podstore adds in Python: argument checks, encoding and
decoding, building rows, connection and transaction handling, error translation. Reads then
shape their rows into the same Python result, with the same code podstore uses for it.

Settings as podstore's: WAL, ``synchronous=FULL``, foreign keys on, in-memory temp store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from podstore import (
    DeviceRunContainerOptions,
    PodDevicesEntry,
    PodStore,
    ResourceDeviceInstances,
)
from podstore.storage.entries import shape_topology
from podstore.storage.sql import entries as q

Params = Sequence[Any] | dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """One statement podstore ran: ``execute`` or ``executemany``, its SQL and parameters."""

    many: bool
    sql: str
    params: Any


class Recorder:
    """Stands in for a store's sqlite3 connection and notes every statement run through it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.calls: list[Call] = []

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        self.calls.append(Call(False, sql, params))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, seq: Iterable[Params]) -> sqlite3.Cursor:
        rows = list(seq)
        self.calls.append(Call(True, sql, rows))
        return self._conn.executemany(sql, rows)

    def cursor(self) -> Any:
        recorder = self

        class _Cursor:
            def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
                return recorder.execute(sql, params)

        return _Cursor()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def record(store: PodStore, call: Callable[[], object]) -> tuple[list[Call], object]:
    """The statements ``call`` makes ``store`` run (in this thread), and its result.

    Reaches into the store's per-thread connection slot: a measuring tool, not an API.
    """
    sessions = store._sessions
    real = sessions.conn()
    slot = sessions._slot()
    recorder = Recorder(real)
    slot.conn = recorder  # type: ignore[assignment]
    try:
        result = call()
    finally:
        slot.conn = real
    return recorder.calls, result


class RawSqlite:
    """One stdlib connection in autocommit mode (statements carry their own BEGIN/COMMIT)."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = wal")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.execute("PRAGMA temp_store = MEMORY")

    def close(self) -> None:
        self.conn.close()

    def replay(self, calls: list[Call]) -> list[list[Any]]:
        """Run recorded statements; the fetched rows of each."""
        conn = self.conn
        out: list[list[Any]] = []
        try:
            for c in calls:
                if c.many:
                    conn.executemany(c.sql, c.params)
                    out.append([])
                else:
                    out.append(conn.execute(c.sql, c.params).fetchall())
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return out


# ---- shaping rows into podstore's result types (the same code as podstore's) ---------------


def _last(rowsets: list[list[Any]]) -> list[Any]:
    return rowsets[-1] if rowsets else []


def shape_container_devices(rowsets: list[list[Any]]) -> set[str] | None:
    rows = _last(rowsets)
    if not rows:
        return None
    return {r[0] for r in rows if r[0] is not None}


def shape_pod_devices(rowsets: list[list[Any]]) -> set[str]:
    return {r[0] for r in _last(rowsets)}


def shape_devices(rowsets: list[list[Any]]) -> dict[str, set[str]]:
    # BEGIN, the resources, one JSON array of device IDs per resource, COMMIT.
    filled = [rows for rows in rowsets if rows]
    if not filled:
        return {}
    resources, arrays = filled[0], filled[1:]
    out: dict[str, set[str]] = {}
    for (resource,), [(ids,)] in zip(resources, arrays, strict=True):
        devs = out[resource] = set(json.loads(ids))
        devs.discard(None)
    return out


def shape_get_container_devices(rowsets: list[list[Any]]) -> ResourceDeviceInstances | None:
    # The same Python shaping podstore applies, so the ratio measures only the rest.
    return shape_topology(_last(rowsets))


def shape_owner(rowsets: list[list[Any]]) -> tuple[str, str] | None:
    rows = _last(rowsets)
    return (rows[0][0], rows[0][1]) if rows else None


def shape_run_options(
    pod_uid: str, container_name: str, rowsets: list[list[Any]]
) -> DeviceRunContainerOptions | None:
    """Whichever shaping the store uses: SQL-merged rows (responses.shape) or the responses
    merged in Python (run_options.merge)."""
    from podstore.pure import run_options
    from podstore.storage import responses

    rows = _last(rowsets)
    if rows and len(rows[0]) == 9:
        return responses.shape(
            pod_uid, container_name, rows, cdi_devices=True, cdi_annotations=False
        )

    if not rows:
        return None
    return run_options.merge(pod_uid, container_name, ((r, x) for r, x in rows if r is not None))


# ---- bulk load ------------------------------------------------------------------------------


def bulk_rows(entries: Iterable[PodDevicesEntry]) -> dict[str, list[tuple[object, ...]]]:
    """The core rows an import of ``entries`` writes into a fresh store, ids assigned: pods,
    containers, allocations, device spans (podstore may write more tables besides: the events,
    and the decoded response JSON in the allocation row)."""
    pods: dict[str, int] = {}
    containers: dict[tuple[int, str], int] = {}
    out: dict[str, list[tuple[object, ...]]] = {
        q.INSERT_POD_WITH_ID: [],
        q.INSERT_CONTAINER_WITH_ID: [],
        q.INSERT_ALLOCATION_WITH_ID: [],
        q.INSERT_SPAN: [],
    }
    for aid, e in enumerate(entries, start=1):
        pid = pods.get(e.pod_uid)
        if pid is None:
            pid = pods[e.pod_uid] = len(pods) + 1
            out[q.INSERT_POD_WITH_ID].append((pid, e.pod_uid))
        cid = containers.get((pid, e.container_name))
        if cid is None:
            cid = containers[(pid, e.container_name)] = len(containers) + 1
            out[q.INSERT_CONTAINER_WITH_ID].append((cid, pid, e.container_name))
        out[q.INSERT_ALLOCATION_WITH_ID].append(
            (aid, cid, e.resource_name, e.device_ids is None, e.alloc_resp, False, None)
        )
        for node, ids in (e.device_ids or {}).items():
            for pos, dev in enumerate(ids or ()):
                # since_seq: the entry's event, the aid-th of a fresh store's import
                out[q.INSERT_SPAN].append((aid, aid, node, pos, dev))
    return out


def executemany_load(path: str, rows: dict[str, list[tuple[object, ...]]]) -> None:
    """Write prepared rows with one ``executemany`` per statement in one durable transaction."""
    raw = RawSqlite(path)
    try:
        conn = raw.conn
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in rows.items():
            conn.executemany(sql, params)
        conn.execute("COMMIT")
    finally:
        raw.close()


def recorded_bulk_rows(store: PodStore, entries: list[PodDevicesEntry]) -> list[Call]:
    """Every statement ``from_checkpoint_data`` runs into ``store`` (a fresh one): the
    complete set of rows podstore writes for those entries, to replay as the raw floor."""
    calls, _ = record(store, lambda: store.from_checkpoint_data(entries))
    return calls


def replay_load(path: str, calls: list[Call]) -> None:
    raw = RawSqlite(path)
    try:
        raw.replay(calls)
    finally:
        raw.close()
