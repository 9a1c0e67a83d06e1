"""Damaged database files: open refuses them with StoreCorruptError; `podstore verify` reports.

Every page of a real store is overwritten in turn (and the header, and the file is cut
short): PodStore.open — writable or read-only — must raise StoreCorruptError, never a raw
sqlite3 error and never succeed quietly; the same pages opened with ``verify="off"`` show
how much the open-time check catches that a first read would not. Invariant breaks that
SQLite cannot see (rows edited from outside) are tests/test_reliability_invariants.py's.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness import filled, workload
from harness.figures import report

from podstore import PodStore, StoreCorruptError
from podstore.cli.main import cli
from podstore.sqlite.integrity import quick_check
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
    unnoticed = 0
    for page in range(pages):
        # page 1 keeps its 100-byte file header (that case is above)
        start = page * PAGE + (100 if page == 0 else 0)
        db = _damaged(pristine, tmp_path, _overwrite(start, rng.randbytes(PAGE - (start % PAGE))))
        for readonly in (False, True):
            with pytest.raises(StoreCorruptError):
                PodStore.open(db, readonly=readonly, verify="blocking")
        assert has_errors(check_store(db, quick=True)), page
        unnoticed += _unnoticed_without_the_check(db)
    report(
        "damage",
        pages_damaged=pages,
        refused_on_open=pages,
        unnoticed_with_verify_off=unnoticed,
    )
    # Without the open-time check some damage goes unseen by the open and a first read: the
    # check earns its cost.
    assert unnoticed > 0


def _unnoticed_without_the_check(db: Path) -> bool:
    """Does a read-only open with verify="off" and a first read (the pod count, what an agent
    asks first) succeed on this damaged file?"""
    try:
        with PodStore.open(db, readonly=True, verify="off") as store:
            store.size()
    except StoreCorruptError:
        return False
    return True


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


def test_what_the_open_time_check_costs(pristine: Path, filled_stores: filled.FilledStores) -> None:
    """The figure docs/reliability.md quotes for verify="blocking": quick_check (what
    PodStore.open runs) on this module's store and on the 10,000-entry filled store, best of
    three. Reported, not asserted: speed targets live in bench/."""
    figures: dict[str, object] = {}
    for name, db in (("small", pristine), ("filled", filled_stores.head_path)):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
        try:
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                quick_check(conn)  # raises StoreCorruptError unless the file is sound
                best = min(best, time.perf_counter() - started)
        finally:
            conn.close()
        figures[f"{name}_mb"] = round(db.stat().st_size / 1e6, 1)
        figures[f"{name}_ms"] = round(best * 1000, 1)
    figures["filled_entries"] = filled_stores.entries
    report("open-check", **figures)
