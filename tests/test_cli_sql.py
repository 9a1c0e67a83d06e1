"""``podstore sql`` and ``PodStore.query`` can only read: every kind of write is refused with exit
status 1 (ReadOnlyStoreError), and the database file, its WAL and its contents stay the same —
with the store closed (no WAL content) and while a writer holds it open (WAL content pending)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from podstore import InvalidInputError, PodStore, ReadOnlyStoreError
from podstore.cli import main

WRITES = [
    "INSERT INTO pods (uid) VALUES ('intruder')",
    "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('entries_json', '[]')",
    "REPLACE INTO pods (id, uid) VALUES (1, 'x')",
    "UPDATE pods SET uid = 'x'",
    "UPDATE allocation_events SET op = 'delete'",
    "DELETE FROM pods",
    "DELETE FROM allocation_events",
    "DROP TABLE pods",
    "DROP VIEW v_allocations",
    "DROP TRIGGER tr_allocation_events_append_only",
    "DROP INDEX ix_allocation_device_spans_device_id",
    "CREATE TABLE t (x)",
    "CREATE TEMP TABLE t (x)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE INDEX ix ON pods (uid)",
    "CREATE TRIGGER tr AFTER INSERT ON pods BEGIN DELETE FROM pods; END",
    "ALTER TABLE pods ADD COLUMN x",
    "ALTER TABLE pods RENAME TO p2",
    "ATTACH DATABASE '{other}' AS other",
    "ATTACH DATABASE ':memory:' AS mem",
    "DETACH DATABASE main",
    "VACUUM",
    "VACUUM INTO '{other}'",
    "REINDEX",
    "ANALYZE",
    "BEGIN IMMEDIATE",
    "SAVEPOINT s",
    "PRAGMA user_version = 5",
    "PRAGMA user_version=5",
    "PRAGMA main.application_id = 7",
    "PRAGMA journal_mode = delete",
    "PRAGMA journal_mode=WAL",
    "PRAGMA query_only = OFF",
    "PRAGMA query_only = 0",
    "PRAGMA writable_schema = ON",
    "PRAGMA foreign_keys = OFF",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA wal_checkpoint",
    "PRAGMA optimize",
    "PRAGMA incremental_vacuum",
    "SELECT load_extension('libnothing')",
    "WITH x AS (SELECT 1) DELETE FROM pods",
    "INSERT INTO pods (uid) SELECT uid || '2' FROM pods",
]

READS = [
    ("SELECT count(*) FROM pods", [(2,)]),
    ("SELECT count(*) FROM v_device_owners", [(3,)]),
    ("PRAGMA user_version", [(0,)]),
    ("PRAGMA journal_mode", [("wal",)]),
    ("PRAGMA table_info(pods)", None),
    ("SELECT name FROM pragma_table_info('pods') ORDER BY cid", [("id",), ("uid",)]),
    ("SELECT value FROM json_each('[1, 2]')", [(1,), (2,)]),
    ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) "
     "SELECT sum(i) FROM n", [(6,)]),
    ("EXPLAIN QUERY PLAN SELECT * FROM pods WHERE uid = 'p'", None),
    ("PRAGMA integrity_check", [("ok",)]),
]  # fmt: skip


def fingerprint(path: Path) -> tuple[str, str, list[str]]:
    """sha256 of the file and of its WAL (missing = empty), and a full logical dump."""

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes() if p.exists() else b"").hexdigest()

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        dump = list(conn.iterdump())
    finally:
        conn.close()
    return sha(path), sha(Path(f"{path}-wal")), dump


def fill(path: Path) -> None:
    with PodStore.open(path) as store:
        store.insert("p", "c", "r", {0: ["a", "b"]}, b"")
        store.insert("q", "c", "r", {1: ["c"]}, None)
        store.set_registered_devices({"r": ["a", "b", "c", "d"]})


@pytest.fixture(params=["closed", "writer-open"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A store nobody has open, or one a writer holds open with changes still in its WAL."""
    path = tmp_path / "s.db"
    fill(path)
    if request.param == "closed":
        yield path
        return
    writer = PodStore.open(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    try:
        writer.insert("w", "c", "r", {0: ["z"]}, None)
        writer.delete(["w"])
        assert Path(f"{path}-wal").stat().st_size > 0
        yield path
    finally:
        conn.close()
        writer.close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


@pytest.mark.parametrize("statement", WRITES)
def test_every_write_is_refused_and_nothing_changes(
    target: Path, capsys: pytest.CaptureFixture[str], statement: str
) -> None:
    other = target.parent / "other.db"
    sql = statement.format(other=other)
    # The read-only open itself may create an empty -wal/-shm next to a closed store, as any
    # SQLite reader does; do one first so that the comparison sees only what the statement did.
    assert run(capsys, "--db", str(target), "sql", "SELECT 1")[0] == 0
    before = fingerprint(target)
    code, out, err = run(capsys, "--db", str(target), "sql", sql)
    assert code == 1, (out, err)
    assert out == ""
    assert err.startswith("podstore: error:")
    assert fingerprint(target) == before
    assert not other.exists()
    with PodStore.open(target) as store, pytest.raises(ReadOnlyStoreError):
        store.query(sql)
    assert fingerprint(target) == before
    assert not other.exists()


def test_attach_cannot_be_used_to_write_another_file(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = target.parent / "victim.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    victim = other.read_bytes()
    for sql in (
        f"ATTACH '{other}' AS v",
        "INSERT INTO v.t VALUES (1)",
        f"SELECT * FROM pragma_table_info('t', '{other}')",
    ):
        code, _, _ = run(capsys, "--db", str(target), "sql", sql)
        assert code == 1
    assert other.read_bytes() == victim


def test_a_second_statement_is_never_run(target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = fingerprint(target)
    code, _, err = run(capsys, "--db", str(target), "sql", "SELECT 1; DELETE FROM pods")
    assert code == 1
    assert "one statement" in err
    with PodStore.open(target) as store, pytest.raises(InvalidInputError):
        store.query("SELECT 1; DELETE FROM pods")
    assert fingerprint(target)[2] == before[2]


@pytest.mark.parametrize(("sql", "rows"), READS)
def test_reads_work(target: Path, sql: str, rows: list[tuple[object, ...]] | None) -> None:
    before = fingerprint(target)
    with PodStore.open(target, readonly=True) as store:
        result = store.query(sql)
    if rows is not None:
        assert result.rows == rows
    assert result.columns
    assert fingerprint(target)[2] == before[2]


def test_query_sees_committed_data_only(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", "r", {0: ["a"]}, None)
        with store.transaction():
            store.insert("q", "c", "r", {0: ["b"]}, None)
            assert store.query("SELECT uid FROM pods ORDER BY uid").rows == [("p",)]
        assert store.query("SELECT uid FROM pods ORDER BY uid").dicts() == [
            {"uid": "p"},
            {"uid": "q"},
        ]


def test_parameters_and_blobs(target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--db",
        str(target),
        "sql",
        "SELECT device_id, numa_node FROM v_allocations WHERE numa_node = :n AND pod_uid = :pod",
        "-p",
        "n=1",
        "-p",
        "pod=q",
        "-o",
        "csv",
    )
    assert code == 0
    assert out.splitlines() == ["device_id,numa_node", "c,1"]
    code, out, _ = run(
        capsys, "--db", str(target), "sql", "SELECT x'00ff' AS b, NULL AS n", "-o", "json"
    )
    assert code == 0
    assert out == '[\n  {\n    "b": "AP8=",\n    "n": null\n  }\n]\n'
