"""Damaged database files: open refuses them with StoreCorruptError; `podstore verify` reports.

Every page of a real store is overwritten in turn (and the header, and the file is cut
short): PodStore.open — writable or read-only — must raise StoreCorruptError, never a raw
sqlite3 error and never succeed quietly. Invariant breaks that SQLite cannot see (rows edited
from outside) are found by podstore.storage.selfcheck / `podstore verify`, which exits 1 on errors.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import workload
from harness.figures import report

from podstore import PodStore, StoreCorruptError
from podstore.cli.main import cli
from podstore.storage.selfcheck import Finding, check_store, has_errors

PAGE = 4096


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("damage") / "pristine.db"
    with PodStore.open(db) as store:
        for i in range(400):
            workload.apply(store, workload.make_op(5, i))
        store.set_registered_devices({"example.com/gpu": [f"dev-{i}" for i in range(40)]})
    # No free pages: damage to a page nothing uses is no damage at all, and would not count.
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("VACUUM")
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    conn.close()
    assert not Path(str(db) + "-wal").exists()
    return db


def _damaged(pristine: Path, tmp_path: Path, damage: Callable[[bytearray], None]) -> Path:
    data = bytearray(pristine.read_bytes())
    damage(data)
    db = tmp_path / "damaged.db"
    db.write_bytes(bytes(data))
    db.chmod(0o600)
    return db


def _overwrite(at: int, data: bytes) -> Callable[[bytearray], None]:
    def damage(buf: bytearray) -> None:
        buf[at : at + len(data)] = data

    return damage


def _cli(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "verify", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_overwrite(0, b"Not a SQLite file"), id="magic"),
        pytest.param(_overwrite(16, random.Random(1).randbytes(84)), id="header-fields"),
        pytest.param(_overwrite(16, b"\x00\x07"), id="page-size"),
        pytest.param(lambda b: b.__delitem__(slice(len(b) // 2, None)), id="truncated"),
        pytest.param(_overwrite(0, b'{"Data": "a kubelet checkpoint"}' * 200), id="json"),
    ],
)
def test_damaged_header_is_refused(
    pristine: Path, tmp_path: Path, damage: Callable[[bytearray], None]
) -> None:
    db = _damaged(pristine, tmp_path, damage)
    for readonly in (False, True):
        with pytest.raises(StoreCorruptError):
            PodStore.open(db, readonly=readonly, verify="blocking")
    findings = check_store(db)
    assert has_errors(findings)
    code, out = _cli(db)
    assert code == 1, out


@pytest.mark.slow
def test_every_damaged_page_is_refused_on_open(pristine: Path, tmp_path: Path) -> None:
    """Random bytes over any single page in use: open raises StoreCorruptError (quick_check on
    open catches pages no query would read until much later, e.g. an index page)."""
    pages = pristine.stat().st_size // PAGE
    rng = random.Random(42)
    for page in range(pages):
        # page 1 keeps its 100-byte file header (that case is above)
        start = page * PAGE + (100 if page == 0 else 0)
        db = _damaged(pristine, tmp_path, _overwrite(start, rng.randbytes(PAGE - (start % PAGE))))
        for readonly in (False, True):
            with pytest.raises(StoreCorruptError):
                PodStore.open(db, readonly=readonly, verify="blocking")
        assert has_errors(check_store(db, quick=True)), page
    report("damage", pages_damaged=pages, refused_on_open=pages)


def test_verify_reports_integrity_check_findings(pristine: Path, tmp_path: Path) -> None:
    # Damage a late page (a table or index leaf): the file still opens for SQLite itself,
    # and verify names what integrity_check found.
    pages = pristine.stat().st_size // PAGE
    db = _damaged(pristine, tmp_path, _overwrite((pages - 2) * PAGE + 8, b"\xff" * 64))
    findings = check_store(db)
    assert has_errors(findings)
    assert {f.check for f in findings} <= {"integrity_check", "open"}
    code, out = _cli(db, "-o", "json")
    assert code == 1
    rows = json.loads(out)
    assert rows and all(r["severity"] == "error" for r in rows)


def test_clean_store_verifies(pristine: Path) -> None:
    assert check_store(pristine) == []
    assert check_store(pristine, quick=True) == []
    code, out = _cli(pristine)
    assert code == 0 and out.strip().endswith(": ok"), out


def _edited(pristine: Path, tmp_path: Path, *sql: str) -> Path:
    db = tmp_path / "edited.db"
    shutil.copy(pristine, db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = OFF")
    for statement in sql:
        conn.execute(statement)
    conn.close()
    return db


def _first_allocation(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT allocation_id, numa_node FROM allocation_devices "
            "GROUP BY allocation_id, numa_node HAVING count(*) >= 2 ORDER BY 1, 2 LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(
    ("check", "sql"),
    [
        (
            "orphan-containers",
            ["UPDATE containers SET pod_id = 999999 WHERE id = (SELECT min(id) FROM containers)"],
        ),
        (
            "orphan-allocations",
            [
                "UPDATE allocations SET container_id = 999999 WHERE id = "
                "(SELECT min(id) FROM allocations)"
            ],
        ),
        (
            "orphan-device-rows",
            [
                "UPDATE allocation_devices SET allocation_id = 999999 "
                "WHERE allocation_id = (SELECT min(allocation_id) FROM allocation_devices)"
            ],
        ),
        ("empty-pods", ["INSERT INTO pods (uid) VALUES ('shell-pod')"]),
        (
            "empty-containers",
            ["INSERT INTO containers (pod_id, name) SELECT min(id), 'shell-container' FROM pods"],
        ),
        ("schema", ["UPDATE alembic_version SET version_num = 'ffffffffffff'"]),
        ("orphan-registered-devices", ["DELETE FROM registered_resources"]),
        ("registered-positions", ["DELETE FROM registered_devices WHERE position = 3"]),
        (
            "responses",
            [
                "UPDATE allocations SET alloc_resp = x'ffffffff' WHERE id = "
                "(SELECT min(id) FROM allocations)"
            ],
        ),
    ],
)
def test_verify_reports_invariant_breaks(
    pristine: Path, tmp_path: Path, check: str, sql: list[str]
) -> None:
    db = _edited(pristine, tmp_path, *sql)
    findings = check_store(db)
    assert any(f.check == check and f.severity == "error" for f in findings), findings
    code, out = _cli(db)
    assert code == 1 and check in out, out


def test_verify_reports_position_gaps_and_duplicates(pristine: Path, tmp_path: Path) -> None:
    aid, node = _first_allocation(pristine)
    gap = _edited(
        pristine,
        tmp_path,
        f"DELETE FROM allocation_devices WHERE allocation_id = {aid} AND numa_node = {node} "
        "AND position = 0",
    )
    assert any(f.check == "positions" for f in check_store(gap))
    dup = _edited(
        pristine,
        tmp_path,
        f"UPDATE allocation_devices SET device_id = (SELECT device_id FROM allocation_devices "
        f"WHERE allocation_id = {aid} AND numa_node = {node} AND position = 0) "
        f"WHERE allocation_id = {aid} AND numa_node = {node} AND position = 1",
    )
    findings = check_store(dup)
    assert [f.check for f in findings] == ["duplicate-devices"]
    assert findings[0].severity == "warning"
    assert _cli(dup)[0] == 0
    assert _cli(dup, "--strict")[0] == 1


def test_duplicate_devices_from_a_caller_are_a_warning(tmp_path: Path) -> None:
    """podstore keeps a list as given (exports must be byte-exact), so a repeated device is
    legal input; verify flags it as a warning, not damage."""
    db = tmp_path / "dup.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "r", {0: ["a", "a"]}, b"")
    findings = check_store(db)
    assert findings == [
        Finding(
            "warning",
            "duplicate-devices",
            findings[0].message,
        )
    ]
    assert "'a' x2 in p/c/r NUMA 0" in findings[0].message


def test_verify_missing_file_is_an_error(tmp_path: Path) -> None:
    code, _ = _cli(tmp_path / "nope.db")
    assert code != 0
    assert not (tmp_path / "nope.db").exists(), "verify must not create the file"
