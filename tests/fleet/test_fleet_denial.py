"""Denial of service by a node or reader role (issue "fleet round 3", items 5 and 7): each is
tried as the attacking role (trust authentication over the test server's socket) and the
server refuses it — `fleet init`'s lock, transactions held open, large objects, temporary
files, `fleet sql`'s timeout switched off."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from typing import Any

import psycopg
import pytest
from harness.fleetlib import as_role, chained, connect, entry_rows, rows, send_batch, wire
from harness.pgserver import PgServer

from podstore import FleetError, InvalidInputError
from podstore.fleet import admin, migrate, read
from podstore.pure import chain

# A FunctionScan keeps the whole series in a tuplestore, spilled to temporary files past
# work_mem: `--max-rows 10` over it wrote 1.1 GiB before.
HUGE_SERIES = "SELECT g FROM generate_series(1, 50000000) AS g"
SPILLING = "SELECT count(*) FROM generate_series(1, 5000000)"
PODSTORE = [sys.executable, "-c", "from podstore.cli import main; main()"]


def _owner(empty_url: str, name: str) -> str:
    """An ordinary role that owns the fleet (fleet init as it): its URL."""
    name = f"{name}_{uuid.uuid4().hex[:8]}"  # roles are the server's, not the database's
    with connect(empty_url) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN CREATEROLE")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
        conn.commit()
    owner = as_role(empty_url, name)
    migrate.init(owner)
    return owner


# ---- fleet init's lock ----------------------------------------------------------------------


def test_a_node_role_cannot_hold_fleet_inits_lock(
    fleet_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrate, "LOCK_TIMEOUT", "3s")  # a planted wait fails, not hangs
    role = admin.grant_node(fleet_url, "node-a").role
    migrate.downgrade(fleet_url, "f0005")  # so that init has an upgrade to make
    with connect(as_role(fleet_url, role)) as node:
        # Every lock a node can take on what init locks: the advisory lock of the first run
        # (any role may), the version table in the one mode its SELECT allows.
        node.execute("SELECT pg_advisory_lock(%s)", (migrate._LOCK_ID,))
        node.execute("LOCK TABLE fleet_alembic_version IN ACCESS SHARE MODE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            node.execute("LOCK TABLE fleet_alembic_version IN EXCLUSIVE MODE")
        node.rollback()
        node.execute("LOCK TABLE fleet_alembic_version IN ACCESS SHARE MODE")
        node.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        report = migrate.init(fleet_url)  # not held up by any of it
        assert (report.before, report.after) == ("f0005", migrate.HEAD_REVISION)
        node.rollback()


def test_before_the_first_init_the_advisory_lock_is_waited_for_a_bounded_time(
    empty_url: str, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the version table exists any role that may connect can hold the advisory lock
    the first run stands on: `fleet init` gives up naming it, instead of waiting for ever."""
    monkeypatch.setattr(migrate, "LOCK_TIMEOUT", "2s")
    role = f"squatter_{uuid.uuid4().hex[:8]}"
    pg.psql(f"CREATE ROLE {role} LOGIN")
    squatter = connect(as_role(empty_url, role))
    squatter.autocommit = True
    database = empty_url.split("@/", 1)[1].split("?")[0]
    rescue = threading.Timer(
        60, lambda: pg.psql(f"SELECT pg_terminate_backend({squatter.info.backend_pid})", database)
    )
    try:
        squatter.execute("SELECT pg_advisory_lock(%s)", (migrate._LOCK_ID,))
        rescue.start()
        with pytest.raises(FleetError, match=f"pid {squatter.info.backend_pid} \\({role}\\)"):
            migrate.init(empty_url)
    finally:
        rescue.cancel()
        squatter.close()
    assert migrate.init(empty_url).after == migrate.HEAD_REVISION


def test_fleet_init_waits_a_bounded_time_for_a_node_that_holds_its_transaction(
    fleet_url: str, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node role may lift its own idle timeout and keep a batch's transaction open: the
    migration's DDL gives up after LOCK_TIMEOUT, names the session, and changes nothing."""
    monkeypatch.setattr(migrate, "LOCK_TIMEOUT", "2s")
    role = admin.grant_node(fleet_url, "node-a").role
    sid = str(uuid.uuid4())
    events, _ = chained(sid, entry_rows(1, 3))
    node = connect(as_role(fleet_url, role))
    database = fleet_url.split("@/", 1)[1].split("?")[0]
    # Should the wait be unbounded (the fix planted away), end the node's session after a
    # while so that the test fails instead of hanging.
    rescue = threading.Timer(
        60, lambda: pg.psql(f"SELECT pg_terminate_backend({node.info.backend_pid})", database)
    )
    try:
        node.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        node.execute("SET LOCAL statement_timeout = 0")
        node.execute("SELECT * FROM fleet_ship_open(%s, 'node-a')", (sid,))
        node.execute(
            "SELECT * FROM fleet_ship_batch(%s, 'node-a', 3, %s, %s, %s)",
            (sid, chain.genesis(sid), *wire(events)),
        )
        rescue.start()
        # What the open transaction holds lets every other node ship, and the readers read.
        other = str(uuid.uuid4())
        with connect(fleet_url) as b:
            b.execute("SET lock_timeout = '2s'")
            b_events, _ = chained(other, entry_rows(1, 3))
            assert send_batch(b, other, "node-b", b_events, chain.genesis(other)) == (3, None)
        assert read.query(fleet_url, "SELECT count(*) FROM fleet_events", timeout=5).rows == [(3,)]
        assert [r["problem"] for r in read.verify(fleet_url, node="node-b").dicts()] == [None]
        with pytest.raises(FleetError, match=f"pid {node.info.backend_pid} \\({role}\\)"):
            migrate.downgrade(fleet_url, "f0004")  # drops a constraint of fleet_events
        assert rows(fleet_url, "SELECT version_num FROM fleet_alembic_version") == [
            (migrate.HEAD_REVISION,)
        ]
    finally:
        rescue.cancel()
        node.close()
    migrate.downgrade(fleet_url, "f0004")  # the session gone, it runs
    migrate.init(fleet_url)


def test_the_owner_can_end_a_node_session_that_holds_its_transaction(empty_url: str) -> None:
    owner = _owner(empty_url, "fleet_owner_end")
    role = admin.grant_node(owner, "node-a").role
    with connect(as_role(empty_url, role)) as node:
        node.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        node.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), 'node-a')")
        with connect(owner) as conn:
            ended = conn.execute("SELECT pg_terminate_backend(%s)", (node.info.backend_pid,))
            assert ended.fetchone() == (True,)
        with pytest.raises(psycopg.OperationalError):
            node.execute("SELECT 1")
    assert rows(owner, "SELECT count(*) FROM fleet_stores") == [(0,)]  # rolled back


def _held(url: str, node: str | None) -> Any:
    """A session of the URL's role inside a transaction with its idle timeout lifted (a
    node's: after opening a store of its own)."""
    conn = connect(url)
    conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
    if node is not None:
        conn.execute("SELECT * FROM fleet_ship_open(gen_random_uuid(), %s)", (node,))
    else:
        conn.execute("SELECT 1")
    return conn


def _alive(conn: Any) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def test_a_stale_node_transaction_is_ended_by_the_server(empty_url: str) -> None:
    """Every shipping call ends the sessions of node roles whose transaction began more than
    STALE_AFTER ago (revision f0006); here the server's function is called with 0 s, as the
    owner: the node's session ends, nobody else's."""
    owner = _owner(empty_url, "fleet_owner_stale")
    role_a = admin.grant_node(owner, "node-a").role
    role_b = admin.grant_node(owner, "node-b").role
    admin.grant_reader(owner, f"stale_reader_{uuid.uuid4().hex[:8]}", login=True)
    (reader,) = rows(owner, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'stale_reader_%'")
    # A node role the owner holds no rights of (granted before this round): left alone.
    with connect(empty_url) as conn:
        conn.execute(f"REVOKE {role_b} FROM {owner.split('://')[1].split('@')[0]}")
        conn.commit()
    node_a = _held(as_role(empty_url, role_a), "node-a")
    node_b = _held(as_role(empty_url, role_b), "node-b")
    others = [_held(as_role(empty_url, reader[0]), None), _held(owner, None)]
    try:
        with connect(owner) as conn:
            (ended,) = conn.execute(
                "SELECT fleet_end_stale_node_sessions(CAST('0' AS interval))"
            ).fetchone()
        assert ended == 1
        assert not _alive(node_a)
        assert _alive(node_b) and all(_alive(c) for c in others)
    finally:
        for conn in (node_a, node_b, *others):
            conn.close()
    # Nobody else may call it.
    with (
        connect(as_role(empty_url, role_a)) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT fleet_end_stale_node_sessions(CAST('0' AS interval))")


def test_every_shipping_call_ends_stale_node_transactions_first(fleet_url: str) -> None:
    (source,) = rows(fleet_url, "SELECT prosrc FROM pg_proc WHERE proname = 'fleet_ship_lock'")
    first = source[0].split("BEGIN", 1)[1].split(";", 1)[0]
    assert "fleet_end_stale_node_sessions(CAST('10 minutes' AS interval))" in first
    for entry in ("fleet_ship_open", "fleet_ship_batch", "fleet_ship_snapshot"):
        (body,) = rows(fleet_url, "SELECT prosrc FROM pg_proc WHERE proname = :p", {"p": entry})
        assert "fleet_ship_lock(" in body[0], entry


# ---- large objects --------------------------------------------------------------------------

LARGE_OBJECT_CALLS = [
    "SELECT lo_create(0)",
    "SELECT lo_creat(-1)",
    "SELECT lo_from_bytea(0, 'kept for ever')",
    "SELECT lo_import('/etc/hostname')",
]


def _large_objects_refused(url: str) -> None:
    for call in LARGE_OBJECT_CALLS:
        with connect(url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(call)


def test_node_and_reader_roles_cannot_persist_large_objects(fleet_url: str) -> None:
    with connect(fleet_url) as conn:  # the superuser may: the fleet's rows are not at stake
        (oid,) = conn.execute("SELECT lo_from_bytea(0, 'x')").fetchone()
        conn.execute("SELECT lo_unlink(%s)", (oid,))
        conn.commit()
    role = admin.grant_node(fleet_url, "node-a").role
    admin.grant_reader(fleet_url, "lo_auditor", login=True)
    for url in (as_role(fleet_url, role), as_role(fleet_url, "lo_auditor")):
        _large_objects_refused(url)
    assert rows(fleet_url, "SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]


def test_a_grant_by_an_ordinary_owner_says_what_it_could_not_bound(empty_url: str) -> None:
    owner = _owner(empty_url, "fleet_owner_lo")
    report = admin.grant_node(owner, "node-a")
    assert any("large objects" in w for w in report.warnings)
    assert any("temp_file_limit" in w for w in report.warnings)
    with connect(as_role(empty_url, report.role)) as node:  # as it warned
        assert node.execute("SELECT lo_unlink(lo_create(0))").fetchone() == (1,)
    admin.grant_node(empty_url, "node-a")  # a superuser completes it
    _large_objects_refused(as_role(empty_url, report.role))
    with pytest.raises(InvalidInputError, match="temp_file_limit"):
        admin.grant_node(empty_url, "node-a", temp_file_limit="-1")


# ---- temporary files --------------------------------------------------------------------------


def _limit_hit(url: str, statement: str) -> None:
    with (
        connect(url) as conn,
        pytest.raises(psycopg.errors.ConfigurationLimitExceeded, match="temp_file_limit"),
    ):
        conn.execute(statement)


def test_node_and_reader_roles_cannot_fill_the_disk_with_temporary_files(fleet_url: str) -> None:
    role = admin.grant_node(fleet_url, "node-a", temp_file_limit="1MB").role
    admin.grant_reader(fleet_url, "tmp_auditor", login=True, temp_file_limit="1MB")
    for url in (as_role(fleet_url, role), as_role(fleet_url, "tmp_auditor")):
        _limit_hit(url, SPILLING)
        # A superuser setting: the role cannot lift it.
        with connect(url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET temp_file_limit = -1")
        with connect(url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT set_config('temp_file_limit', '-1', false)")
    # The owner is not bounded by the roles' limit.
    assert rows(fleet_url, SPILLING) == [(5000000,)]


def test_fleet_sql_as_a_superuser_applies_the_readers_temp_file_limit(fleet_url: str) -> None:
    """Role settings come with a login, not with SET ROLE: `fleet sql` with a superuser URL
    sets the reader's limit itself, before dropping to it."""
    admin.grant_reader(fleet_url, "tmp_reader", temp_file_limit="1MB")
    with pytest.raises(FleetError, match="temp_file_limit"):
        read.query(fleet_url, HUGE_SERIES, max_rows=10, reader_role="tmp_reader")
    reader_args = ("--reader-role", "tmp_reader", "--max-rows", "10")
    result = subprocess.run(
        [*PODSTORE, "fleet", "sql", "--url", fleet_url, *reader_args, HUGE_SERIES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("podstore: error:") and "temp_file_limit" in result.stderr
    assert "cannot reach" not in result.stderr


# ---- the reader's timeout -------------------------------------------------------------------

# The first page (2,000 rows) comes at once and switches the timeout off; the next page would
# take 10 s. `fn` is the spelling of set_config.
LIFTING = (
    "SELECT g, {fn}('statement_timeout', '0', {local}), "
    "CAST(CASE WHEN g > 2000 THEN pg_sleep(0.005) END AS text) "
    "FROM generate_series(1, 4000) AS g"
)


@pytest.fixture
def owner_url(empty_url: str) -> str:
    """An ordinary owner, a member of the reader it granted; set_config() still PUBLIC's (only
    a superuser can revoke it)."""
    owner = _owner(empty_url, "fleet_owner_t")
    report = admin.grant_reader(owner, "podstore_reader")
    assert any("set_config" in w for w in report.warnings)
    return owner


@pytest.mark.parametrize(
    ("fn", "local"),
    [
        ("set_config", "false"),
        ("SET_CONFIG", "true"),
        ("Set_Config", "false"),
        ("pg_catalog.set_config", "true"),
        ('"set_config"', "false"),
    ],
)
def test_a_statement_cannot_switch_its_timeout_off(owner_url: str, fn: str, local: str) -> None:
    sql = LIFTING.format(fn=fn, local=local)
    assert read.query(owner_url, "SELECT current_user").rows == [("podstore_reader",)]
    with pytest.raises(FleetError, match=r"cancelled \(statement timeout\)"):
        read.query(owner_url, sql, timeout=2.0)


@pytest.mark.parametrize(
    "sql",
    [
        "SET statement_timeout = 0",
        "set STATEMENT_TIMEOUT to 0; SELECT pg_sleep(30)",
        "RESET statement_timeout",
        "SET LOCAL statement_timeout = 0",
    ],
)
def test_a_set_statement_is_not_a_query(owner_url: str, sql: str) -> None:
    with pytest.raises(InvalidInputError, match="syntax error"):
        read.query(owner_url, sql, timeout=2.0)


def test_the_grant_commands_take_the_temp_file_limit() -> None:
    from click.testing import CliRunner

    from podstore.cli import cli

    for command in (["grant-node", "node-a"], ["grant-reader", "auditor"]):
        printed = CliRunner().invoke(
            cli, ["fleet", *command, "--temp-file-limit", "2GB", "--print-sql"]
        )
        assert printed.exit_code == 0, printed.output
        assert "SET temp_file_limit = '2GB';" in printed.output
        assert admin.REVOKE_LARGE_OBJECTS + ";" in printed.output
        bad = CliRunner().invoke(
            cli, ["fleet", *command, "--temp-file-limit", "1GB'; DROP ROLE x; --", "--print-sql"]
        )
        assert isinstance(bad.exception, InvalidInputError), bad.output
        assert "ALTER ROLE" not in bad.output  # nothing printed
