"""Every connection runs with the settings the guarantees rest on, or podstore refuses to run.

podstore's promises (docs/reliability.md) rest on SQLite settings: WAL, synchronous=FULL
(NORMAL only when asked), foreign keys on (the cascades from pods down to device rows), temp
b-trees in memory, the busy timeout, and the WAL bounds (journal_size_limit,
wal_autocheckpoint). Asking for a setting is not getting it: SQLite ignores some silently
(``foreign_keys`` inside a transaction), and a build made with SQLITE_DEFAULT_WAL_SYNCHRONOUS=1
turns FULL into NORMAL when it finds a file in WAL mode unless synchronous was set explicitly.
So ``sqlite/connection._configure`` sets each explicitly and reads them all back on every new
connection; a difference raises PodStoreError instead of running with weaker guarantees.

These tests read the settings of live connections themselves (plain PRAGMA reads, not
podstore's read-back), and hand real connections that SQLite left in a weaker state to the
read-back.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from podstore import PodStore, PodStoreError
from podstore.sqlite.connection import (
    JOURNAL_SIZE_LIMIT,
    WAL_AUTOCHECKPOINT,
    ConnectOptions,
    check_settings,
    connect,
    create_sqlalchemy_engine,
    database_url,
)

COMMON = {
    "foreign_keys": 1,
    "temp_store": 2,
    "journal_size_limit": JOURNAL_SIZE_LIMIT,
    "wal_autocheckpoint": WAL_AUTOCHECKPOINT,
}


def _settings(conn: sqlite3.Connection) -> dict[str, object]:
    names = ["journal_mode", "synchronous", "busy_timeout", *COMMON]
    out: dict[str, object] = {n: conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names}
    out["journal_mode"] = str(out["journal_mode"]).lower()
    return out


def _writable(synchronous: int, busy_ms: int = 10_000) -> dict[str, object]:
    return {"journal_mode": "wal", "synchronous": synchronous, "busy_timeout": busy_ms, **COMMON}


def test_the_store_connections_run_with_the_documented_settings(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "r", {0: ["d"]}, b"")
        assert _settings(store._sessions.conn()) == _writable(2)
        # a second thread gets its own connection, configured the same way
        seen: list[dict[str, object]] = []
        worker = threading.Thread(target=lambda: seen.append(_settings(store._sessions.conn())))
        worker.start()
        worker.join()
        assert seen == [_writable(2)]
    with PodStore.open(db, durability="normal", busy_timeout=1.5) as store:
        assert _settings(store._sessions.conn()) == _writable(1, 1500)
    with PodStore.open(db, readonly=True) as store:
        got = _settings(store._sessions.conn())
        # a read-only connection never writes: its journal mode and synchronous do not matter
        assert {k: got[k] for k in ("busy_timeout", *COMMON)} == {"busy_timeout": 10_000, **COMMON}


def test_alembic_runs_on_a_configured_connection(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    PodStore.open(db).close()
    engine = create_sqlalchemy_engine(database_url(str(db)))
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert isinstance(raw, sqlite3.Connection)
            assert _settings(raw) == _writable(2)
    finally:
        engine.dispose()


WEAKER = [
    ("synchronous", "PRAGMA synchronous = NORMAL"),
    ("synchronous", "PRAGMA synchronous = OFF"),
    ("journal_mode", "PRAGMA journal_mode = DELETE"),
    ("foreign_keys", "PRAGMA foreign_keys = 0"),
    ("temp_store", "PRAGMA temp_store = 0"),
    ("journal_size_limit", "PRAGMA journal_size_limit = -1"),
    ("wal_autocheckpoint", "PRAGMA wal_autocheckpoint = 0"),
    ("busy_timeout", "PRAGMA busy_timeout = 0"),
]


@pytest.mark.parametrize(("name", "weaken"), WEAKER, ids=[w[1] for w in WEAKER])
def test_a_weaker_setting_is_refused(tmp_path: Path, name: str, weaken: str) -> None:
    options = ConnectOptions(path=str(tmp_path / "w.db"))
    conn = connect(options)  # passes its own read-back
    try:
        check_settings(conn, options)
        conn.execute(weaken)
        with pytest.raises(PodStoreError, match=rf"{name} is "):
            check_settings(conn, options)
    finally:
        conn.close()


def test_a_setting_sqlite_ignored_silently_is_refused(tmp_path: Path) -> None:
    """PRAGMA foreign_keys is a no-op inside a transaction: SQLite says nothing, the cascades
    would silently stop, and only reading the value back notices."""
    options = ConnectOptions(path=str(tmp_path / "fk.db"))
    conn = connect(options)
    try:
        conn.execute("PRAGMA foreign_keys = 0")
        conn.execute("BEGIN")
        conn.execute("PRAGMA foreign_keys = 1")  # ignored, without an error
        conn.execute("COMMIT")
        with pytest.raises(PodStoreError, match="foreign_keys is 0, not 1"):
            check_settings(conn, options)
    finally:
        conn.close()


def test_normal_durability_is_refused_where_full_was_asked(tmp_path: Path) -> None:
    path = str(tmp_path / "n.db")
    conn = connect(ConnectOptions(path=path, durability="normal"))
    try:
        check_settings(conn, ConnectOptions(path=path, durability="normal"))
        with pytest.raises(PodStoreError, match="synchronous is 1, not 2"):
            check_settings(conn, ConnectOptions(path=path))
    finally:
        conn.close()
