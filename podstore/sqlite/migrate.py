"""Migrate-on-open and the schema revision. The Alembic scripts ship as
``podstore.migrations``; a store already at :data:`HEAD_REVISION` opens without Alembic.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sqlite3
from typing import TYPE_CHECKING, Any, Literal

from podstore.errors import PodStoreError, SchemaError
from podstore.sqlite import forking
from podstore.sqlite.connection import (
    APPLICATION_ID,
    ConnectOptions,
    connect,
    create_sqlalchemy_engine,
    database_url,
    foreign_reason,
    table_names,
)
from podstore.sqlite.files import release_side_files, warn_if_writable_by_others
from podstore.sqlite.integrity import quick_check
from podstore.sqlite.translate import translated_errors

if TYPE_CHECKING:
    import sqlalchemy


def scripts_location(package: str, error: type[PodStoreError] = SchemaError) -> str:
    """Where the Alembic scripts shipped as ``package`` are installed (node or fleet)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise error(f"{package} is not installed; reinstall podstore")
    return str(next(iter(spec.submodule_search_locations)))


@functools.cache
def scripts_at(location: str) -> Any:
    """Alembic's ScriptDirectory of ``location``, loaded once per process."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(location)


@functools.cache
def migrations_dir() -> str:
    """Where podstore.migrations is, looked up once (after dropping privileges it may be hidden)."""
    return scripts_location("podstore.migrations")


def script_directory() -> Any:
    return scripts_at(migrations_dir())


def head_revision() -> str:
    """The newest schema revision this podstore knows."""
    return str(script_directory().get_current_head())


def alembic_config(connection: sqlalchemy.Connection | None = None) -> Any:
    """An Alembic Config built in code (no ini, so no logging reconfiguration)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir())
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


#: current_revision() of a database whose schema was downgraded to base.
BASE = "base"


def current_revision(conn: sqlite3.Connection) -> str | None:
    """The stored revision; None for an empty database, BASE when downgraded to nothing.
    Raises SchemaError for tables without an Alembic version (not podstore's)."""
    with translated_errors():
        names = table_names(conn)
        if not names:
            return None
        if "alembic_version" not in names:
            raise SchemaError(
                "not a podstore database: it has tables but no podstore schema version"
            )
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return BASE if row is None else str(row[0])


#: The newest revision: a store at it opens without Alembic (~140 ms per process start,
#: docs/performance.md). Bump it with every migration; a test pins it to Alembic's head.
HEAD_REVISION = "0012"


def classify_revision(rev: str | None) -> Literal["current", "old", "new-file", "too-new"]:
    if rev is None:
        return "new-file"
    if rev == HEAD_REVISION:
        return "current"
    if rev == BASE:
        # Downgraded on purpose: old, so upgrade=False refuses it.
        return "old"
    if rev == head_revision():
        return "current"
    try:
        known = script_directory().get_revision(rev)
    except Exception:
        known = None
    return "old" if known is not None else "too-new"


def ensure_schema(
    options: ConnectOptions, *, upgrade: bool, check: bool = True
) -> tuple[bool, sqlite3.Connection | None]:
    """Bring the file to head (or check it is there), as PodStore.open promises. Returns
    whether the store lacks podstore's ``application_id`` (the caller's first write sets it:
    no write before the background check passes) and, for a current store, the connection
    that looked, to keep (a connection costs about a millisecond).

    ``check`` runs ``quick_check`` first; a file to migrate gets it anyway. A file not
    podstore's raises SchemaError before any write. The upgrade runs in BEGIN IMMEDIATE with
    transactional DDL: a failure leaves the old schema, racing openers migrate once.
    """
    warn_if_writable_by_others(os.path.abspath(options.path))
    probe = connect(options)
    keep = False
    try:
        with translated_errors():
            reason = foreign_reason(probe)
        if reason is not None:
            probe.close()
            # A read-only connection leaves the -wal and -shm its read made: remove them.
            if options.readonly:
                release_side_files(options.path)
            raise SchemaError(f"not a podstore database: {options.path}: {reason}")
        if check:
            quick_check(probe)
        state = classify_revision(current_revision(probe))
        if state == "old" and not check and upgrade and not options.readonly:
            quick_check(probe)
        with translated_errors():
            unmarked = (
                state == "current"
                and not options.readonly
                and int(probe.execute("PRAGMA application_id").fetchone()[0]) != APPLICATION_ID
            )
        keep = state == "current"
    finally:
        if not keep:
            probe.close()
    if keep:
        return unmarked, probe
    if state == "too-new":
        raise SchemaError(
            "the database was written by a newer podstore (unknown schema revision); "
            "upgrade podstore to read it"
        )
    if options.readonly:
        raise SchemaError(
            "the database schema is not at the current revision and a read-only open never "
            "migrates; open it writable or run `podstore migrate upgrade`"
        )
    if state == "old" and not upgrade:
        raise SchemaError(
            "the database schema is older than this podstore and upgrade=False; run "
            "`podstore migrate upgrade` or open with upgrade=True"
        )
    run_upgrade(options, "head")
    return False, None


def run_upgrade(options: ConnectOptions, target: str) -> None:
    _run_alembic(options, "upgrade", target)


def run_downgrade(options: ConnectOptions, target: str) -> None:
    _run_alembic(options, "downgrade", target)


def _run_alembic(
    options: ConnectOptions, direction: Literal["upgrade", "downgrade"], target: str
) -> None:
    from alembic import command

    engine = create_sqlalchemy_engine(database_url(options.path), options)
    try:
        with forking.activity(), translated_errors(), engine.begin() as connection:
            getattr(command, direction)(alembic_config(connection), target)
            if direction == "upgrade":
                # In the migration's transaction: the store is podstore's exactly when it has
                # a schema.
                connection.exec_driver_sql(f"PRAGMA application_id = {APPLICATION_ID}")
    finally:
        engine.dispose()
