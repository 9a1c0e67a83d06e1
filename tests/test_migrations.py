"""Alembic migrations: open-time upgrade, the alembic command line, both ways, and refusals."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from harness.refmodel import table_dump

from podstore import PodStore, PodStoreError, SchemaError
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import head_revision, run_downgrade, run_upgrade
from podstore.storage.schema import metadata

REPO_ROOT = Path(__file__).resolve().parent.parent
RES = "vendor.com/dev"


def stored_revision(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
    finally:
        conn.close()


def table_names(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
    finally:
        conn.close()


def schema_diff(path: Path) -> list[object]:
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, metadata))
    finally:
        engine.dispose()


def at_base(path: Path) -> Path:
    """A podstore file migrated down to base: versioned, but without the schema."""
    PodStore.open(path).close()
    run_downgrade(ConnectOptions(path=str(path)), "base")
    assert table_names(path) == {"alembic_version"}
    assert stored_revision(path) == []
    return path


def test_open_creates_the_schema_at_head(db_path: Path) -> None:
    assert not db_path.exists()
    PodStore.open(db_path).close()
    assert stored_revision(db_path) == [head_revision()]
    assert table_names(db_path) == set(metadata.tables) | {"alembic_version"}
    assert schema_diff(db_path) == []


def test_open_at_head_does_not_migrate_again(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, {0: ["a"]}, b"")
    before = table_dump(db_path)
    with PodStore.open(db_path, upgrade=False) as store:
        assert store.pods() == {"p"}
    assert table_dump(db_path) == before


def test_alembic_upgrade_head_from_the_repo_root(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    env = {**os.environ, "PODSTORE_DB": str(db)}
    for _ in range(2):  # the second run finds it at head and does nothing
        subprocess.run(
            [sys.executable, "-m", "alembic", "upgrade", "head"],
            cwd=REPO_ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        assert stored_revision(db) == [head_revision()]
    assert schema_diff(db) == []
    with PodStore.open(db, upgrade=False) as store:
        store.insert("p", "c", RES, {0: ["a"]}, b"")
        assert store.pods() == {"p"}


def test_downgrade_to_base_and_up_again(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, {0: ["a"]}, b"")
    at_base(db_path)
    run_upgrade(ConnectOptions(path=str(db_path)), "head")
    assert stored_revision(db_path) == [head_revision()]
    assert schema_diff(db_path) == []
    with PodStore.open(db_path, upgrade=False) as store:
        assert store.pods() == set()
        store.insert("p", "c", RES, {0: ["a"]}, b"")
        assert store.container_devices("p", "c", RES) == {"a"}


def test_open_upgrades_a_file_at_base(db_path: Path) -> None:
    at_base(db_path)
    with PodStore.open(db_path) as store:
        assert store.size() == 0
    assert stored_revision(db_path) == [head_revision()]


def test_upgrade_false_refuses_an_old_schema(db_path: Path) -> None:
    at_base(db_path)
    with pytest.raises(SchemaError):
        PodStore.open(db_path, upgrade=False)
    assert table_names(db_path) == {"alembic_version"}


def test_read_only_open_refuses_a_schema_not_at_head(db_path: Path) -> None:
    at_base(db_path)
    with pytest.raises(SchemaError):
        PodStore.open(db_path, readonly=True)
    assert table_names(db_path) == {"alembic_version"}


def test_read_only_open_refuses_an_empty_sqlite_file(db_path: Path) -> None:
    sqlite3.connect(db_path).close()
    with pytest.raises(SchemaError):
        PodStore.open(db_path, readonly=True)
    assert table_names(db_path) == set()


def test_read_only_open_of_a_missing_file_creates_nothing(db_path: Path) -> None:
    with pytest.raises(PodStoreError):
        PodStore.open(db_path, readonly=True)
    assert not db_path.exists()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_from_a_newer_podstore_is_refused(db_path: Path, readonly: bool) -> None:
    PodStore.open(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    conn.commit()
    conn.close()
    before = table_dump(db_path)
    with pytest.raises(SchemaError, match="newer"):
        PodStore.open(db_path, readonly=readonly)
    assert table_dump(db_path) == before


@pytest.mark.parametrize("readonly", [False, True])
def test_a_foreign_sqlite_file_is_refused_untouched(db_path: Path, readonly: bool) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE pods (name TEXT)")
    conn.execute("INSERT INTO pods VALUES ('not ours')")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError, match="not a podstore"):
        PodStore.open(db_path, readonly=readonly)
    assert table_dump(db_path) == {"pods": [("not ours",)]}


def test_a_failed_migration_leaves_nothing_behind(db_path: Path) -> None:
    # A versioned file at base with a stray table that the initial revision creates last:
    # the upgrade fails on it, and transactional DDL must take back every table before it.
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    conn.execute("CREATE TABLE store_meta (x INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(PodStoreError):
        PodStore.open(db_path)
    assert table_names(db_path) == {"alembic_version", "store_meta"}
    assert stored_revision(db_path) == []


def test_concurrent_first_opens_migrate_once(db_path: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait(10)
            with PodStore.open(db_path) as store:
                store.insert(threading.current_thread().name, "c", RES, None, b"")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener, name=f"t{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert stored_revision(db_path) == [head_revision()]
    with PodStore.open(db_path) as store:
        assert store.pods() == {"t0", "t1", "t2", "t3"}


# ---- logging -------------------------------------------------------------------------------


@pytest.fixture
def host_logging() -> Iterator[logging.Logger]:
    """A host application's logging set-up, restored afterwards."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), logging.root.manager.disable)
    app = logging.getLogger("host.app")
    handler = logging.StreamHandler()
    app.addHandler(handler)
    app.setLevel(logging.DEBUG)
    try:
        yield app
    finally:
        app.removeHandler(handler)
        app.setLevel(logging.NOTSET)
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        logging.disable(saved[2])


def _logging_state() -> dict[str, object]:
    manager = logging.root.manager
    return {
        "disable": manager.disable,
        "root_level": logging.root.level,
        "root_handlers": list(logging.root.handlers),
        "loggers": {
            name: (lg.level, list(lg.handlers), lg.disabled, lg.propagate)
            for name, lg in manager.loggerDict.items()
            if isinstance(lg, logging.Logger)
            and not name.startswith(("alembic", "sqlalchemy"))  # created on first use
        },
    }


def test_opening_never_reconfigures_logging(host_logging: logging.Logger, tmp_path: Path) -> None:
    for name in ("alembic", "alembic.runtime.migration", "sqlalchemy.engine"):
        logging.getLogger(name)  # exist before, so their state is compared too
    before = _logging_state()
    before_alembic = {
        name: (lg.level, list(lg.handlers), lg.disabled)
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and name.startswith(("alembic", "sqlalchemy"))
    }
    PodStore.open(tmp_path / "new.db").close()  # creates and migrates
    at_base(tmp_path / "old.db")
    PodStore.open(tmp_path / "old.db").close()  # upgrades
    assert _logging_state() == before
    for name, state in before_alembic.items():
        lg = logging.getLogger(name)
        assert (lg.level, list(lg.handlers), lg.disabled) == state, name
    assert not host_logging.disabled
    assert host_logging.isEnabledFor(logging.DEBUG)
