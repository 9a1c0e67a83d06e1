"""The node's CDI devices (``cdi_device_nodes``), brought to what the spec files say.

A source that cannot be read never deletes what a readable one wrote: a directory that is not
there (or cannot be listed) keeps the rows of its files, and so does a spec file that cannot be
read as a whole. A directory that is there drops the rows of files that are no longer in it —
present and empty is "no CDI devices". Directories not named in a read are left as they are.
"""

from __future__ import annotations

import os
import sqlite3

from podstore.checkpoint.cdi_specs import CdiSpecs
from podstore.storage.sql import cdi as sql
from podstore.types import CdiReport


def _rows(devices: dict[str, tuple[str, ...]]) -> set[tuple[str, str]]:
    return {(name, node) for name, nodes in devices.items() for node in nodes}


def apply(conn: sqlite3.Connection, specs: CdiSpecs) -> CdiReport:
    """Write ``specs`` in the caller's transaction."""
    stored: dict[str, set[tuple[str, str]]] = {}
    for path, name, node in conn.execute(sql.CDI_SPEC_ROWS):
        stored.setdefault(str(path), set()).add((str(name), str(node)))
    read_dirs = set(specs.dirs) - set(specs.absent)
    keep = set(specs.unreadable)
    removed = 0
    for path in sorted(stored):
        if os.path.dirname(path) in read_dirs and path not in specs.devices and path not in keep:
            conn.execute(sql.CDI_DELETE_SPEC, (path,))
            removed += 1
    written = 0
    for path, devices in sorted(specs.devices.items()):
        rows = _rows(devices)
        if rows == stored.get(path, set()):
            continue
        conn.execute(sql.CDI_DELETE_SPEC, (path,))
        conn.executemany(sql.CDI_INSERT, [(path, name, node) for name, node in sorted(rows)])
        written += 1
    count = sum(len(d) for d in specs.devices.values())
    return CdiReport(written, removed, count, specs.absent, specs.skipped)
