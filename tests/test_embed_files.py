"""What an open does to the files on disk: a file podstore refuses is left byte for byte as it
was (another application's database is not switched to WAL), podstore marks its own stores
with ``PRAGMA application_id``, and read-only opens leave no ``-wal`` or ``-shm`` behind.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from podstore import PodStore, SchemaError
from podstore.sqlite.connection import APPLICATION_ID
from podstore.storage.selfcheck import check_store

RES = "vendor.com/gpu"
OTHER_APP = 0x12345678


def _snapshot(path: Path) -> dict[str, str]:
    """Every file of the store's family that exists, with its content's hash."""
    out = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(path) + suffix)
        if p.exists():
            out[suffix or "db"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _application_id(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA application_id").fetchone()[0])
    finally:
        conn.close()


def _foreign_with_tables(path: Path, *, wal: bool = False) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode = wal")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('another application''s data')")
    conn.close()


def _foreign_id_only(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA application_id = {OTHER_APP}")
    conn.close()


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize(
    "make, match",
    [
        (_foreign_with_tables, "no podstore schema version"),
        (lambda p: _foreign_with_tables(p, wal=True), "no podstore schema version"),
        (_foreign_id_only, "another application"),
    ],
    ids=["tables", "tables-wal", "application-id-only"],
)
def test_a_refused_file_is_left_exactly_as_it_was(
    tmp_path: Path, make: object, match: str, readonly: bool
) -> None:
    db = tmp_path / "other.db"
    make(db)  # type: ignore[operator]
    before = _snapshot(db)
    mode = os.stat(db).st_mode
    with pytest.raises(SchemaError, match=match):
        PodStore.open(db, readonly=readonly)
    assert _snapshot(db) == before  # same files, same bytes: not switched to WAL, no side files
    assert os.stat(db).st_mode == mode


def test_a_foreign_rollback_database_keeps_its_journal_mode(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    _foreign_with_tables(db)
    with pytest.raises(SchemaError):
        PodStore.open(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert conn.execute("SELECT body FROM notes").fetchall() == [("another application's data",)]
    conn.close()


def test_new_stores_carry_podstores_application_id(db_path: Path) -> None:
    PodStore.open(db_path).close()
    assert _application_id(db_path) == APPLICATION_ID == 0x50445354
    # The ASCII bytes "PDST" at offset 68 of the header.
    assert db_path.read_bytes()[68:72] == b"PDST"


def test_an_older_store_gets_the_id_with_its_first_write(db_path: Path) -> None:
    """A store made before podstore set the id: an open alone changes nothing (it may only
    read, and no write lands before the open-time check has passed); its first write sets it,
    in the same transaction."""
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA application_id = 0")
    conn.close()
    with PodStore.open(db_path) as store:
        assert store.pods() == {"p"}
    assert _application_id(db_path) == 0
    with PodStore.open(db_path, readonly=True) as store:
        assert store.pods() == {"p"}
    assert _application_id(db_path) == 0
    with PodStore.open(db_path) as store:
        store.insert("q", "c", RES, None, b"")
    assert _application_id(db_path) == APPLICATION_ID
    assert [f for f in check_store(str(db_path)) if f.severity == "error"] == []


def test_a_failed_first_write_leaves_the_id_unset_for_the_next(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA application_id = 0")
    conn.close()

    class Boom(Exception):
        pass

    with PodStore.open(db_path) as store:
        with pytest.raises(Boom), store.transaction():
            store.insert("q", "c", RES, None, b"")
            raise Boom
        assert _application_id(db_path) == 0  # rolled back with the block
        store.delete(["nobody"])
    assert _application_id(db_path) == APPLICATION_ID


# ---- read-only opens ---------------------------------------------------------------------------


def _clean_store(path: Path) -> None:
    with PodStore.open(path) as store:
        store.insert("p", "c", RES, {0: ["d"]}, b"")
    assert _snapshot(path).keys() == {"db"}  # a clean close leaves the main file alone


def test_readonly_open_leaves_no_side_files(db_path: Path) -> None:
    _clean_store(db_path)
    before = _snapshot(db_path)
    with PodStore.open(db_path, readonly=True) as store:
        assert store.pods() == {"p"}
        assert store.query("SELECT count(*) FROM pods").rows == [(1,)]
        with store.reader() as reader:
            assert list(reader.stream("SELECT uid FROM pods")) == [("p",)]
    assert _snapshot(db_path) == before


def test_read_commands_leave_no_side_files(db_path: Path) -> None:
    _clean_store(db_path)
    before = _snapshot(db_path)
    script = Path(sys.executable).parent / "podstore"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "podstore.cli"]
    for command in (["status"], ["pods"], ["devices"], ["history"], ["sql", "SELECT 1"],
                    ["verify"], ["export", str(db_path.parent / "exported")],
                    ["migrate", "current"], ["metrics"], ["owners", "G1"],
                    ["get", "p1"]):  # fmt: skip
        # get exits 1 for an unknown pod: what matters here is the files, not the answer
        subprocess.run([*argv, "--db", str(db_path), *command], check=command[0] != "get",
                       capture_output=True)  # fmt: skip
        assert _snapshot(db_path) == before, command


def test_readonly_close_keeps_the_files_a_writer_uses(db_path: Path) -> None:
    """While a writer has the store open, a reader's close removes nothing (SQLite grants the
    exclusive lock the removal needs only when no one else has the file open); the reader saw
    the writer's commits, and the writer goes on writing."""
    _clean_store(db_path)
    writer = PodStore.open(db_path)
    writer.insert("w1", "c", RES, None, b"")
    with PodStore.open(db_path, readonly=True) as reader:
        assert reader.pods() == {"p", "w1"}
        writer.insert("w2", "c", RES, None, b"")
        assert reader.pods() == {"p", "w1", "w2"}  # never a stale state
    assert Path(str(db_path) + "-wal").exists() and Path(str(db_path) + "-shm").exists()
    writer.insert("w3", "c", RES, None, b"")
    writer.close()
    with PodStore.open(db_path, readonly=True) as again:
        assert again.pods() == {"p", "w1", "w2", "w3"}


def test_readonly_close_beside_another_readers_open_store(db_path: Path) -> None:
    """Two read-only stores in one process: the first one's close leaves the files the second
    still reads through."""
    _clean_store(db_path)
    first = PodStore.open(db_path, readonly=True)
    second = PodStore.open(db_path, readonly=True)
    assert first.pods() == second.pods() == {"p"}
    first.close()
    writer_done = threading.Event()

    def write() -> None:
        with PodStore.open(db_path) as w:
            w.insert("late", "c", RES, None, b"")
        writer_done.set()

    t = threading.Thread(target=write)
    t.start()
    t.join()
    assert writer_done.is_set()
    assert second.pods() == {"p", "late"}
    second.close()
