"""A bounded write-ahead log: a long audit read pins the WAL; once it ends, the WAL shrinks.

While a reader holds a snapshot, SQLite cannot restart the WAL: every commit appends, and
checkpoints cannot copy past the reader's mark, so the file grows with every durable insert.
When the reader finishes, SQLite's own autocheckpoint (``wal_autocheckpoint``, 1,000 pages)
copies everything at the next commit and the commit after restarts the log from its start —
and podstore's ``journal_size_limit`` (``JOURNAL_SIZE_LIMIT``) truncates the file then. No
per-commit work is added: the truncate happens once per restart of a WAL that outgrew the
limit, never in the steady state (checked below too). Without the limit SQLite leaves the file
at its largest size for ever (the last test shows it with SQLite's default).

PODSTORE_WAL_INSERTS sets the durable inserts made while the reader holds its snapshot
(default 10,000).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from click.testing import CliRunner
from harness.figures import report

from podstore import ContainerAllocateResponse, PodStore
from podstore.cli.main import cli
from podstore.sqlite.connection import JOURNAL_SIZE_LIMIT, WAL_AUTOCHECKPOINT
from podstore.sqlite.files import wal_size
from podstore.storage.selfcheck import check_store

INSERTS = int(os.environ.get("PODSTORE_WAL_INSERTS", "10000"))
# Commits after the reader is gone within which the WAL must be back under the limit: one
# to checkpoint everything, one to restart (and truncate) the log.
WITHIN = 3
# Inserts before the reader starts: a store with a steady-state WAL (more than one
# autocheckpoint's worth of commits).
PREFILL = 500


def _resp(i: int) -> bytes:
    msg = ContainerAllocateResponse()
    msg.envs["NVIDIA_VISIBLE_DEVICES"] = f"GPU-{i:08d}"
    dev = msg.devices.add()
    dev.host_path = dev.container_path = f"/dev/nvidia{i % 8}"
    dev.permissions = "rw"
    return msg.SerializeToString(deterministic=True)


def _insert(store: PodStore, i: int) -> None:
    # A node's churn: pods come and go over a working set of 2,000.
    store.insert(f"pod-{i % 2000}", "main", "nvidia.com/gpu", {i % 2: [f"G{i}", f"H{i}"]}, _resp(i))


def _pinned_reader(db: Path, table: str = "allocations") -> sqlite3.Connection:
    """An operator's ad-hoc audit (``sqlite3 -readonly``) left open inside a read."""
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute(f"SELECT count(*) FROM {table}").fetchone()
    return reader


def test_wal_returns_under_the_limit_after_a_long_reader(tmp_path: Path) -> None:
    db = tmp_path / "wal.db"
    started = time.monotonic()
    with PodStore.open(db) as store:  # durability="full": every insert is fsynced
        for i in range(PREFILL):
            _insert(store, i)
        steady_before = wal_size(str(db))
        reader = _pinned_reader(db)
        for i in range(INSERTS):
            _insert(store, PREFILL + i)
        pinned = wal_size(str(db))
        snapshot_rows = reader.execute("SELECT count(*) FROM allocations").fetchone()[0]
        reader.execute("COMMIT")
        reader.close()
        after: list[int] = []
        for i in range(WITHIN):
            _insert(store, PREFILL + INSERTS + i)
            after.append(wal_size(str(db)))
        # the steady state again: the bound holds without further truncation
        steady_max = 0
        for i in range(3 * WAL_AUTOCHECKPOINT // 10):
            _insert(store, PREFILL + WITHIN + INSERTS + i)
            steady_max = max(steady_max, wal_size(str(db)))
    seconds = round(time.monotonic() - started, 1)
    report(
        "wal-bound",
        durable_inserts_while_pinned=INSERTS,
        journal_size_limit=JOURNAL_SIZE_LIMIT,
        wal_bytes_before_reader=steady_before,
        wal_bytes_pinned=pinned,
        wal_bytes_after_each_commit=after,
        wal_bytes_steady_max=steady_max,
        seconds=seconds,
    )
    assert snapshot_rows == PREFILL  # the reader really kept its old snapshot
    assert pinned > 10 * JOURNAL_SIZE_LIMIT, "the reader did not pin the WAL"
    assert min(after) <= JOURNAL_SIZE_LIMIT, f"WAL still {after} bytes {WITHIN} commits later"
    assert after[-1] <= JOURNAL_SIZE_LIMIT
    assert steady_before <= JOURNAL_SIZE_LIMIT and steady_max <= JOURNAL_SIZE_LIMIT
    assert check_store(db) == []


def test_without_a_limit_sqlite_keeps_the_grown_wal(tmp_path: Path) -> None:
    """The same shape with SQLite's default (journal_size_limit=-1) on a plain connection:
    the log restarts, but the file keeps its largest size — the limit is what shrinks it."""
    db = tmp_path / "plain.db"
    writer = sqlite3.connect(db, isolation_level=None)
    assert writer.execute("PRAGMA journal_size_limit").fetchone()[0] == -1
    writer.execute("PRAGMA journal_mode = wal")
    writer.execute("PRAGMA synchronous = OFF")  # durability is not the point here; speed is
    writer.execute("CREATE TABLE t (x BLOB)")
    reader = _pinned_reader(db, "t")
    row = "INSERT INTO t VALUES (randomblob(40000))"  # about ten pages
    for _ in range(500):
        writer.execute(row)
    pinned = wal_size(str(db))
    reader.execute("COMMIT")
    reader.close()
    sizes = []
    for _ in range(WITHIN + 2):
        writer.execute(row)
        sizes.append(wal_size(str(db)))
    assert pinned > 2 * JOURNAL_SIZE_LIMIT
    assert min(sizes) >= pinned, sizes  # restarted, never shrunk
    # the same connection with podstore's limit: back under it within a few commits
    writer.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    limited = []
    for _ in range(WAL_AUTOCHECKPOINT // 10 + WITHIN):
        writer.execute(row)
        limited.append(wal_size(str(db)))
    writer.close()
    assert min(limited) <= JOURNAL_SIZE_LIMIT, limited


def test_status_reports_the_wal_size(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "r", {0: ["d"]}, b"")
        result = CliRunner().invoke(cli, ["--db", str(db), "status", "--json"])
        assert result.exit_code == 0, result.output
        info = json.loads(result.output)
        # open by this store too, so the log still holds the insert
        assert info["wal_bytes"] == wal_size(str(db)) > 0
        table = CliRunner().invoke(cli, ["--db", str(db), "status"])
        assert "wal bytes" in table.output and str(info["wal_bytes"]) in table.output
