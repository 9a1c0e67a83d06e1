"""``node_files``: per checkpoint kind the store holds, the format its file was written in, the
manager's policy, and the file's *form* — what writing it back byte for byte needs beyond the
items (JSON; each kind says what it keeps there). A file's checksum is not kept: export
computes the one kubelet would write."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from podstore.storage.node.items import dumps
from podstore.storage.sql import node as sql


@dataclass(frozen=True, slots=True)
class FileRow:
    version: str
    policy_name: str | None
    form: dict[str, Any]


def get(conn: sqlite3.Connection, kind: str) -> FileRow | None:
    row = conn.execute(sql.FILE, (kind,)).fetchone()
    if row is None:
        return None
    version, policy, form = row
    return FileRow(str(version), policy, json.loads(form))


def put(conn: sqlite3.Connection, kind: str, version: str, form: dict[str, Any]) -> bool:
    """Record the kind's format and form; whether either differs from what was there."""
    old = get(conn, kind)
    if old is not None and (old.version, old.form) == (version, form):
        return False
    conn.execute(sql.SET_FILE, (kind, version, dumps(form)))
    return True


def set_policy(conn: sqlite3.Connection, kind: str, policy: str) -> None:
    conn.execute(sql.SET_POLICY, (policy, kind))
