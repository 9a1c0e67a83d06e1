"""PodStore.open's integrity check: "auto" by default (full after an unclean close, else the
full check in the background, writes waiting for it), "blocking", "background" or "off"."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from podstore import ContainerAllocateResponse, PodStore, StoreCorruptError
from podstore.sqlite import migrate
from podstore.sqlite.connection import ConnectOptions

PAGE = 4096


def _store(path: Path) -> None:
    with PodStore.open(path) as store:
        for i in range(300):
            resp = ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": f"GPU-{i}"})
            store.insert(f"pod-{i}", "main", "nvidia.com/gpu", {0: [f"GPU-{i}"]}, resp)


def test_head_revision_constant_is_alembic_head() -> None:
    """Opening a current store skips Alembic only while this constant names the head."""
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_background_check_passes_on_a_sound_file(tmp_path: Path) -> None:
    _store(tmp_path / "s.db")
    with PodStore.open(tmp_path / "s.db", verify="background") as store:
        assert store.wait_verified(timeout=60)
        assert store.size() == 300


@pytest.mark.parametrize("verify", ["background", "blocking"])
def test_damage_is_reported_either_way(tmp_path: Path, verify: str) -> None:
    """Random bytes over the last page in use: "blocking" refuses the open; "background"
    returns, then wait_verified and every later call raise StoreCorruptError."""
    db = tmp_path / "s.db"
    _store(db)
    data = bytearray(db.read_bytes())
    last = len(data) // PAGE - 1
    data[last * PAGE : (last + 1) * PAGE] = random.Random(7).randbytes(PAGE)
    db.write_bytes(bytes(data))
    try:
        store = PodStore.open(db, verify=verify)  # type: ignore[arg-type]
    except StoreCorruptError:
        assert verify == "blocking"
        return
    assert verify == "background"
    with store:
        with pytest.raises(StoreCorruptError):
            store.wait_verified(timeout=60)
        with pytest.raises(StoreCorruptError):
            store.pods()


def test_off_skips_the_check(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    data = bytearray(db.read_bytes())
    last = len(data) // PAGE - 1
    data[last * PAGE : (last + 1) * PAGE] = random.Random(7).randbytes(PAGE)
    db.write_bytes(bytes(data))
    with PodStore.open(db, verify="off", readonly=True) as store:
        assert store.wait_verified(timeout=0)


# ---- verify="auto", the default ----------------------------------------------------------------


def _leaf_page(db: Path, table: str) -> int:
    """A leaf page of ``table`` that is not its root (no look-up by key reads it)."""
    conn = sqlite3.connect(db)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        root_page = root.fetchone()[0]
        pages = [
            r[0]
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
                (table,),
            )
            if r[0] != root_page
        ]
    finally:
        conn.close()
    assert pages, f"{table} has no leaf page besides its root"
    return int(pages[0])


def _damage_page(db: Path, page: int) -> None:
    with open(db, "r+b") as f:
        f.seek((page - 1) * PAGE + 8)
        f.write(random.Random(page).randbytes(PAGE - 8))


def test_auto_after_a_clean_close_answers_at_once_and_refuses_writes_on_damage(
    tmp_path: Path,
) -> None:
    """A cleanly closed file gets the full check in the background: open answers, the first
    write waits for the check and raises, and the file is not written."""
    db = tmp_path / "s.db"
    _store(db)
    assert not Path(f"{db}-wal").exists()
    _damage_page(db, _leaf_page(db, "allocation_device_spans"))
    before = db.read_bytes()
    store = PodStore.open(db)  # the default is verify="auto"
    with store:
        with pytest.raises(StoreCorruptError):
            store.insert("new-pod", "main", "nvidia.com/gpu", {0: ["GPU-new"]}, None)
        with pytest.raises(StoreCorruptError):
            store.wait_verified(timeout=60)
        with pytest.raises(StoreCorruptError):
            store.pods()
    assert db.read_bytes() == before


def test_auto_on_a_sound_clean_file_checks_in_the_background(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    with PodStore.open(db) as store:
        assert store.size() == 300
        store.insert("new-pod", "main", "nvidia.com/gpu", {0: ["GPU-new"]}, None)
        assert store.wait_verified(timeout=60)
    with PodStore.open(db, readonly=True) as store:
        assert store.wait_verified(timeout=60)
        assert store.size() == 301


def test_auto_after_an_unclean_close_checks_everything_before_returning(tmp_path: Path) -> None:
    """A -wal holding frames means the last close was not clean: the full check runs at open,
    so a damaged page is refused there."""
    db = tmp_path / "s.db"
    _store(db)
    page = _leaf_page(db, "allocation_device_spans")
    crashed = tmp_path / "crashed.db"
    with PodStore.open(db) as store:
        store.insert("late", "main", "nvidia.com/gpu", {0: ["GPU-late"]}, None)
        # The three files as a crash leaves them: the main file and a log with the commit.
        for suffix in ("", "-wal"):
            Path(f"{crashed}{suffix}").write_bytes(Path(f"{db}{suffix}").read_bytes())
    assert Path(f"{crashed}-wal").stat().st_size > 0
    _damage_page(crashed, page)
    with pytest.raises(StoreCorruptError):
        PodStore.open(crashed)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b.__delitem__(slice(len(b) - PAGE, None)), id="truncated"),
        pytest.param(lambda b: b.__setitem__(slice(16, 18), b"\x00\x07"), id="page-size"),
        pytest.param(lambda b: b.__setitem__(slice(28, 32), b"\x00\x00\x00\x02"), id="count"),
    ],
)
def test_auto_refuses_a_damaged_header_at_open(tmp_path: Path, damage: Any) -> None:
    """SQLite's own reading of the header (at the open's first statement) refuses these."""
    db = tmp_path / "s.db"
    _store(db)
    data = bytearray(db.read_bytes())
    damage(data)
    db.write_bytes(bytes(data))
    for readonly in (False, True):
        with pytest.raises(StoreCorruptError):
            PodStore.open(db, readonly=readonly)


def test_auto_after_a_clean_close_refuses_a_damaged_root_page_on_use(tmp_path: Path) -> None:
    """A root page damaged in a cleanly closed file: open answers (nothing at open reads that
    page), a read that meets it raises, and so does the first write, which waits for the
    background check; the file is not written."""
    db = tmp_path / "s.db"
    _store(db)
    conn = sqlite3.connect(db)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'pods'").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * PAGE)
        f.write(b"\x00")
    before = db.read_bytes()
    with PodStore.open(db) as store:
        with pytest.raises(StoreCorruptError):
            store.pods()
        with pytest.raises(StoreCorruptError):
            store.insert("new-pod", "main", "nvidia.com/gpu", {0: ["GPU-new"]}, None)
        with pytest.raises(StoreCorruptError):
            store.wait_verified(timeout=60)
    assert db.read_bytes() == before


def test_auto_checks_everything_before_migrating(tmp_path: Path) -> None:
    """A store that needs a migration is checked in full first: a migration writes."""
    db = tmp_path / "s.db"
    _store(db)
    migrate.run_downgrade(ConnectOptions(path=str(db)), "0003")
    _damage_page(db, _leaf_page(db, "allocation_devices"))  # a table below revision 0006
    with pytest.raises(StoreCorruptError):
        PodStore.open(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0003",)]
    conn.close()
