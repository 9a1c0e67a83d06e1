"""The lean raw-sqlite3 baseline: what a user would write instead of podstore, by hand.

The same logical content per ``insert`` — the entry (pod, container, resource, NUMA map, the
response bytes) and one history row — in the leanest schema that still answers the podDevices
questions: one allocation row keyed by (pod, container, resource), device rows in a
``WITHOUT ROWID`` table with a device index, one history row. Plain statements on a stdlib
connection with podstore's connection settings (WAL, the same ``synchronous``, foreign keys),
one ``BEGIN IMMEDIATE … COMMIT`` per call. It does what podstore's caller-facing work needs
too: the message is serialised, the NUMA map encoded as JSON for the history row, the time
stamped. It leaves out what podstore adds on purpose: the decoded response rows, the
per-device history index, the pod/container levels, argument checks, error translation.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime

from bench.workload import Allocation
from podstore import PodDevicesEntry

SCHEMA = """
CREATE TABLE entries (
    id INTEGER PRIMARY KEY,
    pod_uid TEXT NOT NULL,
    container TEXT NOT NULL,
    resource TEXT NOT NULL,
    device_ids_null INTEGER NOT NULL,
    alloc_resp BLOB,
    UNIQUE (pod_uid, container, resource)
);
CREATE TABLE devices (
    entry_id INTEGER NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    numa_node INTEGER NOT NULL,
    position INTEGER NOT NULL,
    device_id TEXT NOT NULL,
    PRIMARY KEY (entry_id, numa_node, position)
) WITHOUT ROWID;
CREATE INDEX devices_by_id ON devices (device_id);
CREATE TABLE history (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    op TEXT NOT NULL,
    pod_uid TEXT,
    container TEXT,
    resource TEXT NOT NULL,
    device_ids TEXT
);
"""

UPSERT = """
    INSERT INTO entries (pod_uid, container, resource, device_ids_null, alloc_resp)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (pod_uid, container, resource)
    DO UPDATE SET device_ids_null = excluded.device_ids_null, alloc_resp = excluded.alloc_resp
    RETURNING id
"""
INSERT_DEVICE = "INSERT INTO devices VALUES (?, ?, ?, ?)"
CLEAR_DEVICES = "DELETE FROM devices WHERE entry_id = ?"
INSERT_HISTORY = """
    INSERT INTO history (ts, op, pod_uid, container, resource, device_ids) VALUES (?, ?, ?, ?, ?, ?)
"""
POD_ENTRIES = """
    SELECT e.container, e.resource, d.numa_node, d.device_id
    FROM entries e LEFT JOIN devices d ON d.entry_id = e.id
    WHERE e.pod_uid = ? ORDER BY e.id, d.numa_node, d.position
"""
DELETE_POD = "DELETE FROM entries WHERE pod_uid = ?"

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeanSqlite:
    """One connection to a lean store."""

    def __init__(self, path: str, synchronous: str = "FULL") -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = wal")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'entries'").fetchone():
            self.conn.executescript(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def insert(self, a: Allocation) -> None:
        """One durable transaction: the entry (upserted), its device rows, a history row."""
        resp = a.alloc_resp.SerializeToString(deterministic=True)
        history = _JSON.encode({str(k): v for k, v in sorted(a.devices.items())})
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            (eid,) = conn.execute(
                UPSERT, (a.pod_uid, a.container_name, a.resource_name, 0, resp)
            ).fetchone()
            conn.execute(CLEAR_DEVICES, (eid,))
            conn.executemany(
                INSERT_DEVICE,
                [(eid, n, p, d) for n, ids in a.devices.items() for p, d in enumerate(ids)],
            )
            conn.execute(
                INSERT_HISTORY,
                (_now(), "insert", a.pod_uid, a.container_name, a.resource_name, history),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def delete(self, pod_uid: str) -> None:
        """The pod's entries go, each with a history row naming the devices it had."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            maps: dict[tuple[str, str], dict[str, list[str]]] = {}
            for container, resource, node, device in conn.execute(POD_ENTRIES, (pod_uid,)):
                per_numa = maps.setdefault((container, resource), {})
                if device is not None:
                    per_numa.setdefault(str(node), []).append(device)
            ts = _now()
            conn.executemany(
                INSERT_HISTORY,
                [(ts, "delete", pod_uid, c, r, _JSON.encode(m)) for (c, r), m in maps.items()],
            )
            conn.execute(DELETE_POD, (pod_uid,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def load(self, entries: Iterable[PodDevicesEntry]) -> None:
        """A whole state in one transaction (untimed set-up of the lean store)."""
        conn = self.conn
        ts = _now()
        entry_rows, device_rows, history_rows = [], [], []
        for i, e in enumerate(entries, start=1):
            per_numa = e.device_ids or {}
            entry_rows.append(
                (
                    i,
                    e.pod_uid,
                    e.container_name,
                    e.resource_name,
                    e.device_ids is None,
                    e.alloc_resp,
                )
            )
            device_rows.extend(
                (i, n, p, d) for n, ids in per_numa.items() for p, d in enumerate(ids or ())
            )
            history_rows.append(
                (
                    ts,
                    "import",
                    e.pod_uid,
                    e.container_name,
                    e.resource_name,
                    _JSON.encode({str(k): v for k, v in sorted(per_numa.items())}),
                )
            )
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", entry_rows)
        conn.executemany(INSERT_DEVICE, device_rows)
        conn.executemany(INSERT_HISTORY, history_rows)
        conn.execute("COMMIT")

    def container_devices(self, pod_uid: str, container: str, resource: str) -> set[str] | None:
        """An answer to cross-check the lean store against podstore's (same state)."""
        rows = self.conn.execute(
            "SELECT d.device_id FROM entries e LEFT JOIN devices d ON d.entry_id = e.id "
            "WHERE e.pod_uid = ? AND e.container = ? AND e.resource = ?",
            (pod_uid, container, resource),
        ).fetchall()
        if not rows:
            return None
        return {r[0] for r in rows if r[0] is not None}
