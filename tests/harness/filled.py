"""Filled stores at every schema revision, and what "intact" means for an upgrade.

A node upgrades podstore once per release, on a store that holds its allocations. The
migration crash harnesses (kill -9 in tests/test_reliability_migrate_kill.py, power loss in
tests/test_reliability_migrate_powerloss.py) start from such stores:

- :func:`build_head_store` fills a store at the head revision through the public API with
  ``entries`` entries of every shape the checkpoint knows (null and empty NUMA maps and lists,
  null and empty responses, responses with every kind of setting, nil responses) and registered
  devices;
- :func:`downgrade_copy` takes it down to an older revision with Alembic, so that each old
  revision holds exactly that revision's tables, filled;
- :func:`old_revisions` lists the revisions a store can be upgraded from, as Alembic knows them
  (never hard-coded: a new revision is covered as soon as it exists).

After a crash the file must be at the old or the new revision, never between:
:func:`fingerprint` pins every row and the schema of a file (an interrupted upgrade that left the
old revision must have left the old file exactly), and :func:`api_state` is every entry as
podstore reads it (an upgrade that finished must show exactly what the store held before).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import workload
from podstore import PodDevicesEntry, PodStore
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, script_directory

RESOURCES = workload.RESOURCES


def revisions() -> list[str]:
    """Every revision Alembic knows, oldest first."""
    return [s.revision for s in reversed(list(script_directory().walk_revisions()))]


def old_revisions() -> list[str]:
    """Every revision a store can be upgraded from (all but the head), oldest first."""
    return revisions()[:-1]


def _entries(n: int, seed: int) -> tuple[list[PodDevicesEntry], list[tuple[str, str, str]]]:
    rng = random.Random(seed)
    restored: list[PodDevicesEntry] = []
    nil: list[tuple[str, str, str]] = []
    for i in range(n):
        pod, container = f"pod-{i // 4:05d}", f"c{i % 2}"
        resource = RESOURCES[(i // 2) % 2]
        if i % 4 == 3:
            resource = RESOURCES[2]
        args = workload._insert(rng, f"{seed}-{i}").args
        if i % 97 == 5:
            nil.append((pod, container, resource))  # inserted with a nil response below
            continue
        resp: bytes | None = args["resp"]
        if i % 53 == 7:
            resp = None  # a JSON-null AllocResp, restored as an empty response
        restored.append(PodDevicesEntry(pod, container, resource, args["devices"], resp))
    return restored, nil


def build_head_store(path: Path, entries: int, seed: int = 2026) -> None:
    """A store at head holding ``entries`` entries (a few with a nil response), closed and
    checkpointed (no -wal left)."""
    restored, nil = _entries(entries, seed)
    with PodStore.open(path) as store:
        store.from_checkpoint_data(restored)
        with store.transaction():
            for pod, container, resource in nil:
                store.insert(pod, container, resource, {0: [f"nil-{pod}"]}, None)
        store.set_registered_devices(
            {r: [f"{r}-dev-{k}" for k in range(16)] for r in RESOURCES[:2]} | {RESOURCES[2]: None}
        )
    _checkpoint(path)


def _checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size == 0:
        wal.unlink()


def downgrade_copy(source: Path, target: Path, revision: str) -> None:
    """Copy a closed store and take the copy down to ``revision`` (checkpointed, closed)."""
    shutil.copyfile(source, target)
    os.chmod(target, 0o600)
    run_downgrade(ConnectOptions(path=str(target)), revision)
    # The pages of the dropped tables would sit on the free list, which a store that was
    # always at this revision does not have; the upgrade should grow the file as it would.
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        conn.execute("VACUUM")
    finally:
        conn.close()
    _checkpoint(target)
    assert stored_revision(target) == revision


def copy_store(source: Path, target: Path) -> None:
    """A fresh copy of a closed store file (and nothing of an earlier round's WAL)."""
    for side in ("-wal", "-shm"):
        Path(f"{target}{side}").unlink(missing_ok=True)
    shutil.copyfile(source, target)
    os.chmod(target, 0o600)


def stored_revision(path: Path) -> str | None:
    """The revision in the file (None: no version row). Opening recovers a crashed WAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        conn.close()
    assert len(rows) <= 1, rows
    return str(rows[0][0]) if rows else None


@dataclass(frozen=True)
class Fingerprint:
    """The schema and a digest of every row of every table of a file."""

    schema: tuple[tuple[str, str, str, str | None], ...]
    tables: tuple[tuple[str, int, str], ...]  # (name, rows, sha256 of the rows in rowid order)

    def counts(self) -> dict[str, int]:
        return {name: count for name, count, _ in self.tables}

    def differences(self, other: Fingerprint) -> list[str]:
        out = []
        if self.schema != other.schema:
            out.append("schema differs")
        mine, theirs = (
            dict((t[0], t[1:]) for t in self.tables),
            dict((t[0], t[1:]) for t in other.tables),
        )
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                out.append(f"{name}: {mine.get(name)} != {theirs.get(name)}")
        return out


def fingerprint(path: Path) -> Fingerprint:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        schema, counts = _shape(conn)
        tables = []
        for name in sorted(counts):
            info = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            columns = [r[1] for r in info]
            # SQLite renders each row (quote() keeps types apart: 1, '1', X'01', NULL), so
            # hashing 100,000 rows costs one string, not 100,000 Python tuples. A WITHOUT
            # ROWID table (revision 0004 on) is in primary-key order, the others in rowid order.
            (ddl,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
            ).fetchone()
            clustered = "WITHOUT ROWID" in str(ddl).upper()
            order = (
                ", ".join(f'"{r[1]}"' for r in sorted(info, key=lambda r: r[5]) if r[5])
                if clustered
                else "rowid"
            )
            row = " || ',' || ".join(f'quote("{c}")' for c in columns)
            count, text = conn.execute(
                f"SELECT count(*), group_concat(r, char(10)) FROM "
                f'(SELECT {row} AS r FROM "{name}" ORDER BY {order})'
            ).fetchone()
            digest = hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()
            tables.append((str(name), int(count), digest))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return Fingerprint(schema, tuple(tables))


def api_state(path: Path) -> tuple[Any, ...]:
    """Every entry as stored and read back by podstore at the head revision — key, position,
    NUMA map (null kept apart from empty), response bytes and the null-response flag, nil
    responses included — with the registered devices and the store_meta values other than
    the store's identity (which every upgrade to 0003 makes anew)."""
    from podstore.storage.entries import current_registered, read_entries

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN")
        entries = tuple(read_entries(conn))
        registered = current_registered(conn)
        meta = conn.execute(
            "SELECT key, value FROM store_meta WHERE key <> 'store_id' ORDER BY key"
        ).fetchall()
        conn.execute("COMMIT")
    finally:
        conn.close()
    return entries, tuple(registered.items()), tuple(meta)


# ---- the stores of one session, and the outcome of an interrupted upgrade -------------------


@dataclass
class Start:
    """One revision to upgrade from: its filled file and what each outcome must look like."""

    revision: str
    path: Path  # the filled store at this revision (never written; each round copies it)
    digest: str  # sha256 of its bytes
    fingerprint: Fingerprint  # the old outcome is exactly this file
    head_schema: tuple[tuple[str, str, str, str | None], ...]  # of a finished upgrade
    head_counts: dict[str, int]


@dataclass
class FilledStores:
    entries: int
    head: str
    head_path: Path  # the filled store at the head revision (never written)
    api: tuple[Any, ...]  # api_state of the store before any downgrade
    starts: dict[str, Start]


def build_filled_stores(directory: Path, entries: int) -> FilledStores:
    """The head store and a filled copy at every older revision, each with the reference
    outcomes of a finished upgrade (made by upgrading a copy once)."""
    from podstore.storage.selfcheck import check_store

    directory.mkdir(parents=True, exist_ok=True)
    head_path = directory / "head.db"
    build_head_store(head_path, entries)
    head = revisions()[-1]
    api = api_state(head_path)
    starts: dict[str, Start] = {}
    for rev in old_revisions():
        path = directory / f"at-{rev}.db"
        downgrade_copy(head_path, path, rev)
        done = directory / f"at-{rev}-upgraded.db"
        copy_store(path, done)
        PodStore.open(done).close()
        assert check_store(done) == [], f"a finished upgrade from {rev} does not verify"
        assert api_state(done) == api, f"the upgrade from {rev} changed entries"
        upgraded = fingerprint(done)
        starts[rev] = Start(
            rev,
            path,
            _digest(path),
            fingerprint(path),
            upgraded.schema,
            upgraded.counts(),
        )
    return FilledStores(entries, head, head_path, api, starts)


def outcome(path: Path, stores: FilledStores, start: Start) -> str:
    """``"old"`` or ``"new"``: which revision an interrupted upgrade left, after checking that
    the file is exactly one of the two. Raises AssertionError otherwise."""
    from podstore.storage.selfcheck import check_connection

    rev = stored_revision(path)  # a plain writable connection: recovers a crashed WAL
    if rev == start.revision:
        if _digest(path) == start.digest:
            # In WAL mode only a checkpoint writes the main file, and it copies committed
            # frames only: an upgrade that never committed leaves the file's bytes as they
            # were (the uncommitted frames left in the -wal are ignored, as the revision
            # just read shows).
            return "old"
        # Not the same bytes: then the same rows, schema and sound b-trees (every invariant
        # `podstore verify` checks is a function of the rows, so it finds what it finds in
        # the old file).
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
        assert integrity == ["ok"], integrity
        diff = fingerprint(path).differences(start.fingerprint)
        assert not diff, f"at the old revision {rev} but not the old file: {diff[:5]}"
        return "old"
    assert rev == stores.head, f"revision {rev}: neither the old {start.revision} nor the head"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        findings = [str(f) for f in check_connection(conn)]
        schema, counts = _shape(conn)
    finally:
        conn.close()
    assert findings == [], findings
    assert schema == start.head_schema, "at the head, but its schema differs"
    assert counts == start.head_counts, "at the head, but its row counts differ"
    assert api_state(path) == stores.api, "at the head, but the entries differ"
    return "new"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shape(
    conn: sqlite3.Connection,
) -> tuple[tuple[tuple[str, str, str, str | None], ...], dict[str, int]]:
    """The schema and each table's row count (what Fingerprint holds, without the digests)."""
    schema = tuple(
        (str(r[0]), str(r[1]), str(r[2]), r[3])
        for r in conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        )
    )
    counts = {
        str(name): int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])
        for name, kind, _, _ in schema
        if kind == "table"
    }
    return schema, counts
