"""Per-node and reader rights, enforced by PostgreSQL: the tests log in AS the restricted roles
(trust authentication over the test server's socket) and show the server refuse every
forbidden write, every other node's store, every new object, and the server's files and
programs; ``fleet sql`` refuses to run with a superuser URL unless the reader role is there and
safe."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from harness.fleetlib import as_role, chained, connect, entry_rows, rows, send_batch
from harness.pgserver import PgServer

from podstore import FleetError, FleetRefusedError, InvalidInputError, ReadOnlyStoreError
from podstore.cli import cli
from podstore.fleet import admin, read, schema, views
from podstore.pure import chain

TABLES = [t.name for t in schema.metadata.sorted_tables]
FIRST_COLUMN = {t.name: next(iter(t.columns)).name for t in schema.metadata.sorted_tables}
VIEWS = [name for name, _ in views.VIEWS]
PODSTORE = [sys.executable, "-c", "from podstore.cli import main; main()"]

# Statements a restricted role must be refused, whatever the table: {table} and {column} (its
# first column) are filled in.
TABLE_WRITES = [
    "UPDATE {table} SET {column} = {column}",
    "DELETE FROM {table}",
    "TRUNCATE {table}",
    "INSERT INTO {table} ({column}) VALUES (NULL)",
    "COPY {table} FROM STDIN",
    "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
    "ALTER TABLE {table} ADD COLUMN x int",
    "DROP TABLE {table}",
]
NEW_OBJECTS = [
    "CREATE TABLE evil (x int)",
    "CREATE TEMP TABLE evil (x int)",
    "CREATE FUNCTION evil() RETURNS int LANGUAGE sql RETURN 1",
    "CREATE SCHEMA evil",
    "CREATE VIEW evil AS SELECT 1",
    "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres",
    "SELECT set_config('role', 'postgres', false)",
]
SERVER_REACH = [
    "COPY (SELECT 1) TO PROGRAM 'id'",
    "COPY (SELECT 1) TO '/tmp/podstore-evil'",
    "COPY fleet_stores FROM PROGRAM 'id'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT pg_terminate_backend({pid})",
    "SELECT pg_reload_conf()",
]


def _refused(url: str, statement: str) -> str:
    """Run ``statement`` as the URL's role in a transaction of its own: the server's error."""
    with connect(url) as conn:
        try:
            conn.execute(statement)
        except psycopg.Error as exc:
            conn.rollback()
            return f"{type(exc).__name__}: {exc}"
        raise AssertionError(f"the server accepted {statement!r} from {url}")


def _other_backend(url: str) -> Any:
    """A session of the superuser, for the roles to try to terminate."""
    conn = connect(url)
    conn.autocommit = True
    return conn


def _server_reach(owner_url: str, url: str) -> list[str]:
    """SERVER_REACH tried as the URL's role against a session of the owner, which survives;
    the server's errors."""
    seen = []
    with _other_backend(owner_url) as victim:
        pid = victim.info.backend_pid
        for statement in SERVER_REACH:
            seen.append(_refused(url, statement.format(pid=pid)))
        assert victim.execute("SELECT 1").fetchone() == (1,)
    assert not os.path.exists("/tmp/podstore-evil")
    return seen


def _all_permission_denied(seen: list[str]) -> None:
    others = [s for s in seen if "InsufficientPrivilege" not in s and "permission denied" not in s]
    assert not others, others


def _ship(url: str, sid: str, node: str, n: int = 10) -> tuple[int, str | None]:
    events, _ = chained(sid, entry_rows(1, n))
    with connect(url) as conn:
        return send_batch(conn, sid, node, events, chain.genesis(sid))


def test_role_names() -> None:
    assert admin.node_role("node-a.example.com") == "podstore_node_node_a_example_com"
    assert admin.node_role("GPU_Node7") == "podstore_node_" + "_" * 5 + "ode7"
    with pytest.raises(InvalidInputError, match="--role"):
        admin.node_role("n" * 60)
    for bad in ("pg_monitor", "x; DROP TABLE fleet_events", "a$b", "", "1abc"):
        with pytest.raises(InvalidInputError):
            admin.grant_node_sql("n", bad)


def test_a_node_role_ships_its_own_node_and_nothing_else(fleet_url: str) -> None:
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    report = admin.grant_node(fleet_url, "rights-a.example")
    assert report.role == "podstore_node_rights_a_example"
    assert _ship(fleet_url, sid_b, "rights-b") == (10, None)  # node b, shipped by the owner
    node_a = as_role(fleet_url, report.role)
    # Its own node: through the shipping functions only.
    assert _ship(node_a, sid_a, "rights-a.example") == (10, None)
    # Another node's name: the server refuses the role outright.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not ship for node"):
        _ship(node_a, str(uuid.uuid4()), "rights-b")
    # Its own node's name on another node's store: refused as another node's (not counted:
    # that row is not its own to write).
    shipped, refused = _ship(node_a, sid_b, "rights-a.example")
    assert shipped == 0 and refused is not None and "another node, rights-b" in refused
    assert rows(
        fleet_url,
        "SELECT node, last_seq, refusals FROM fleet_stores WHERE store_id = CAST(:s AS uuid)",
        {"s": sid_b},
    ) == [("rights-b", 10, 0)]  # not counted on a store that is not its own


def test_the_server_refuses_a_node_role_every_other_write_and_object(
    fleet_url: str, pg: PgServer
) -> None:
    role = admin.grant_node(fleet_url, "rights-w").role
    assert _ship(as_role(fleet_url, role), str(uuid.uuid4()), "rights-w") == (10, None)
    node = as_role(fleet_url, role)
    seen = []
    for table in TABLES:
        for template in [*TABLE_WRITES, "SELECT * FROM {table}"]:
            seen.append(_refused(node, template.format(table=table, column=FIRST_COLUMN[table])))
    for view in VIEWS:
        seen.append(_refused(node, f"SELECT * FROM {view}"))
    for statement in NEW_OBJECTS:
        seen.append(_refused(node, statement))
    # The functions behind the entry points are nobody's to call.
    for call in (
        "SELECT fleet_ship_lock(gen_random_uuid(), 'rights-w')",
        "SELECT fleet_ship_refuse(gen_random_uuid(), 'x')",
        "SELECT fleet_may_ship('rights-w')",
        # The kept intervals' (revision f0009): a reader's to call, a node's never.
        "SELECT fleet_intervals_catch_up()",
        "SELECT fleet_intervals_refresh(gen_random_uuid())",
    ):
        seen.append(_refused(node, call))
    seen += _server_reach(fleet_url, node)
    _all_permission_denied(seen)
    # What a node role can read: the schema revision, nothing of any store.
    with connect(node) as conn:
        assert conn.execute("SELECT version_num FROM fleet_alembic_version").fetchone()


# The shipping path (revision f0002): the entry points `fleet grant-node` grants, and the
# functions behind them, which write as their caller and are nobody's to call.
SHIP_ENTRY_POINTS = admin.SHIP_FUNCTIONS
SHIP_INTERNALS = (
    "fleet_chain_expected(fleet_stores)",
    "fleet_ship_check(fleet_stores, text)",
    "fleet_ship_refuse(uuid, text)",
    "fleet_ship_lock(uuid, text)",
    "fleet_may_ship(text)",
    # Recomputes a store's kept intervals as the owner (revision f0009): the catch-up's only.
    "fleet_intervals_refresh(uuid)",
)


def test_no_shipping_function_is_executable_through_public(fleet_url: str) -> None:
    """EXECUTE on the shipping path is revoked from PUBLIC: a reader (SELECT and PUBLIC's
    rights) may call none of it, a node role only the entry points it was granted. The calls
    above are refused at the tables too; this pins the first wall."""
    node = admin.grant_node(fleet_url, "rights-x").role
    admin.grant_reader(fleet_url, "rights_x_reader")
    query = "SELECT has_function_privilege(:role, CAST(:fn AS regprocedure), 'EXECUTE')"
    for fn in (*SHIP_ENTRY_POINTS, *SHIP_INTERNALS):
        assert rows(fleet_url, query, {"role": "rights_x_reader", "fn": fn}) == [(False,)], fn
        granted = fn in SHIP_ENTRY_POINTS
        assert rows(fleet_url, query, {"role": node, "fn": fn}) == [(granted,)], fn


def test_grant_node_print_sql_applied_by_hand_gives_the_same_rights(
    fleet_url: str, pg: PgServer
) -> None:
    result = CliRunner().invoke(
        cli, ["fleet", "grant-node", "rights-p", "--role", "rights_printed", "--print-sql"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("BEGIN;") and "COMMIT;" in result.output
    assert rows(fleet_url, "SELECT count(*) FROM fleet_node_grants") == [(0,)]  # only printed
    database = fleet_url.split("@/", 1)[1].split("?")[0]
    pg.psql(result.output, database=database)
    node = as_role(fleet_url, "rights_printed")
    assert _ship(node, str(uuid.uuid4()), "rights-p") == (10, None)
    assert "InsufficientPrivilege" in _refused(node, "DELETE FROM fleet_events")


def test_a_superuser_cannot_be_made_a_node_or_reader_role(fleet_url: str) -> None:
    with pytest.raises(InvalidInputError, match="superuser"):
        admin.grant_node(fleet_url, "x", role="postgres")
    with pytest.raises(InvalidInputError):
        admin.grant_reader(fleet_url, "postgres")


def test_the_server_refuses_a_reader_everything_but_reading(fleet_url: str) -> None:
    sid = str(uuid.uuid4())
    assert _ship(fleet_url, sid, "rights-r") == (10, None)
    admin.grant_reader(fleet_url, "rights_auditor", login=True)
    auditor = as_role(fleet_url, "rights_auditor")
    with connect(auditor) as conn:
        for relation in [*TABLES, *VIEWS]:
            conn.execute(f"SELECT * FROM {relation}").fetchall()
        assert conn.execute("SELECT count(*) FROM fleet_events").fetchone() == (10,)
    seen = []
    for table in TABLES:
        for template in TABLE_WRITES:
            seen.append(_refused(auditor, template.format(table=table, column=FIRST_COLUMN[table])))
    for statement in NEW_OBJECTS:
        seen.append(_refused(auditor, statement))
    seen.append(_refused(auditor, f"SELECT fleet_ship_open('{sid}', 'rights-r')"))
    seen.append(_refused(auditor, f"SELECT fleet_intervals_refresh('{sid}')"))
    # What a reader may call: the kept intervals' catch-up, which writes as the owner.
    with connect(auditor) as conn:
        assert conn.execute("SELECT fleet_intervals_catch_up()").fetchone() == (10,)
        conn.commit()
    seen += _server_reach(fleet_url, auditor)
    _all_permission_denied(seen)
    assert rows(fleet_url, "SELECT count(*) FROM fleet_events") == [(10,)]


def _fleet_sql(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODSTORE, "fleet", "sql", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fleet_sql_with_a_superuser_url_is_read_only_by_the_server(
    fleet_url: str, tmp_path: Path
) -> None:
    # The list, each of which succeeded before: now PostgreSQL refuses them all.
    sid = str(uuid.uuid4())
    assert _ship(fleet_url, sid, "rights-s") == (10, None)
    marker = tmp_path / "ran"
    with _other_backend(fleet_url) as victim:
        pid = victim.info.backend_pid
        for statement in (
            f"COPY (SELECT 1) TO PROGRAM 'id > {marker}'",
            f"COPY (SELECT 1) TO '{marker}'",
            "SELECT pg_read_file('/etc/passwd')",
            f"SELECT pg_terminate_backend({pid})",
            f"SELECT set_config('role', 'postgres', true), pg_terminate_backend({pid})",
            "SELECT set_config('session_authorization', 'postgres', true)",
            "LOCK TABLE fleet_events IN ACCESS EXCLUSIVE MODE",
            "SELECT * FROM fleet_events FOR UPDATE",
            "DELETE FROM fleet_events",
            "WITH x AS (DELETE FROM fleet_events RETURNING 1) SELECT * FROM x",
            "SELECT 1; DELETE FROM fleet_events",
            "COMMIT; DELETE FROM fleet_events",
            "SELECT fleet_ship_open(gen_random_uuid(), 'x')",
        ):
            result = _fleet_sql(fleet_url, statement)
            assert result.returncode == 1, (statement, result.stdout)
            assert result.stderr.startswith("podstore: error:"), result.stderr
            assert "Traceback" not in result.stderr
        assert victim.execute("SELECT 1").fetchone() == (1,)
    assert not marker.exists()
    assert rows(fleet_url, "SELECT count(*) FROM fleet_events") == [(10,)]
    ok = _fleet_sql(
        fleet_url, "-o", "csv", "SELECT current_user, count(*) FROM v_fleet_allocations"
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[1].startswith("podstore_reader,")


def test_fleet_sql_refuses_a_superuser_url_without_a_safe_reader_role(empty_url: str) -> None:
    from podstore.fleet import migrate

    migrate.init(empty_url)  # no grant-reader in this database
    missing = _fleet_sql(empty_url, "--reader-role", "no_such_reader_role", "SELECT 1")
    assert missing.returncode == 1
    assert "superuser" in missing.stderr and "grant-reader no_such_reader_role" in missing.stderr
    # A reader role, but set_config() is still PUBLIC's here: a statement could switch back
    # to the superuser, so it does not run.
    with connect(empty_url) as conn:
        conn.execute(
            "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rights_unsafe') "
            "THEN CREATE ROLE rights_unsafe NOLOGIN; END IF; END$$"
        )
        conn.execute("GRANT SELECT ON fleet_events TO rights_unsafe")
        conn.commit()
    unsafe = _fleet_sql(empty_url, "--reader-role", "rights_unsafe", "SELECT 1")
    assert unsafe.returncode == 1 and "set_config" in unsafe.stderr
    with pytest.raises(FleetError, match="set_config"):
        read.query(empty_url, "SELECT 1", reader_role="rights_unsafe")
    admin.grant_reader(empty_url, "podstore_reader")
    assert read.query(empty_url, "SELECT current_user").rows == [("podstore_reader",)]
    # An ordinary login role without a reader role runs with its own rights, read-only.
    admin.grant_node(empty_url, "rights-o")
    node = as_role(empty_url, "podstore_node_rights_o")
    # A reader role that reaches other sessions is no reader to drop to: it could end the
    # node's session.
    with connect(empty_url) as conn:
        conn.execute(
            "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rights_signals') "
            "THEN CREATE ROLE rights_signals NOLOGIN; END IF; END$$"
        )
        conn.execute("GRANT pg_signal_backend TO rights_signals")
        conn.commit()
    with _other_backend(node) as victim:
        kill = f"SELECT pg_terminate_backend({victim.info.backend_pid})"
        with pytest.raises(FleetError, match="sessions or state"):
            read.query(empty_url, kill, reader_role="rights_signals")
        assert victim.execute("SELECT 1").fetchone() == (1,)
    result = read.query(node, "SELECT current_user", reader_role="no_such_reader_role")
    assert result.rows == [("podstore_node_rights_o",)]
    # Its own rights include shipping; the read-only transaction still refuses the write.
    with pytest.raises(ReadOnlyStoreError):
        read.query(node, "SELECT fleet_ship_open(gen_random_uuid(), 'rights-o')",
                   reader_role="no_such_reader_role")  # fmt: skip
    assert rows(empty_url, "SELECT count(*) FROM fleet_stores") == [(0,)]


def test_admin_commands_are_refused_to_node_and_reader_roles(fleet_url: str) -> None:
    sid = str(uuid.uuid4())
    assert _ship(fleet_url, sid, "rights-x") == (10, None)
    role = admin.grant_node(fleet_url, "rights-x").role
    admin.grant_reader(fleet_url, "rights_auditor2", login=True)
    for url in (as_role(fleet_url, role), as_role(fleet_url, "rights_auditor2")):
        with pytest.raises(FleetRefusedError) as info:
            admin.retire(url, node="rights-x")
        assert info.value.reason == "permission"
        with pytest.raises(FleetRefusedError):
            admin.rename_node(url, "rights-x", "rights-y")
        with pytest.raises(FleetRefusedError):
            admin.grant_node(url, "rights-x", role="rights_escalated")
    assert rows(fleet_url, "SELECT node, retired_at FROM fleet_stores") == [("rights-x", None)]


# Spelled out here, not read from fleet/sql.py: a name dropped from the code must fail a case.
@pytest.mark.parametrize(
    "predefined",
    [
        "pg_execute_server_program",
        "pg_read_server_files",
        "pg_write_server_files",
        "pg_signal_backend",
        "pg_read_all_stats",
        "pg_read_all_settings",
        "pg_stat_scan_tables",
        "pg_monitor",
        "pg_read_all_data",
        "pg_write_all_data",
        "pg_checkpoint",
        "pg_maintain",
    ],
)
def test_fleet_sql_refuses_a_reader_role_in_any_predefined_role_that_reaches_the_server(
    fleet_url: str, predefined: str
) -> None:
    role = "rights_" + predefined.removeprefix("pg_")
    with connect(fleet_url) as conn:
        if (
            conn.execute("SELECT FROM pg_roles WHERE rolname = %s", (predefined,)).fetchone()
            is None
        ):
            pytest.skip(f"{predefined}: not in this PostgreSQL version")
        conn.execute(f"CREATE ROLE {role} NOLOGIN")
        conn.execute(f"GRANT {predefined} TO {role}")
        conn.commit()
    # pg_read_server_files would read this file; pg_read_all_stats another session's query.
    with pytest.raises(FleetError, match="sessions or state"):
        read.query(fleet_url, "SELECT pg_read_file('/etc/hostname')", reader_role=role)
