"""``node_files``: per kind held, its format, policy, *form* (what writing it back byte for byte
needs beyond the items) and digest. No checksum is kept: export computes kubelet's."""

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


def put(
    conn: sqlite3.Connection, kind: str, version: str, form: dict[str, Any], digest: str | None
) -> bool:
    """Record the kind's format, form and file digest; whether format or form differ from
    what was there."""
    old = get(conn, kind)
    changed = old is None or (old.version, old.form) != (version, form)
    if changed:
        conn.execute(sql.SET_FILE, (kind, version, dumps(form)))
    conn.execute(sql.SET_DIGEST, (digest, kind))
    return changed


def digest(conn: sqlite3.Connection, kind: str) -> str | None:
    """The digest of the file bytes ``kind`` was last brought to (None: none, or set
    otherwise)."""
    row = conn.execute(sql.DIGEST, (kind,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def set_policy(conn: sqlite3.Connection, kind: str, policy: str) -> None:
    conn.execute(sql.SET_POLICY, (policy, kind))
