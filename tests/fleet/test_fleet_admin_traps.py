"""The owner's commands cannot be turned against the record (issue "fleet round 3"): one role
per node, a rename that never merges or half-happens, a retired node's role shipping nothing,
and node roles bounded by the server."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from harness.fleetlib import as_role, chained, connect, entry_rows, rows, send_batch

from podstore import InvalidInputError, PodStore
from podstore.fleet import admin
from podstore.pure import chain


def _grants(url: str) -> list[tuple[object, ...]]:
    return rows(url, "SELECT node, role_name FROM fleet_node_grants ORDER BY 1, 2")


def _ship(url: str, node: str, sid: str | None = None) -> tuple[int, str | None]:
    sid = sid or str(uuid.uuid4())
    events, _ = chained(sid, entry_rows(1, 3))
    with connect(url) as conn:
        return send_batch(conn, sid, node, events, chain.genesis(sid))


@pytest.mark.parametrize(
    ("first", "second"), [("gpu-1.zone-a", "gpu-1-zone.a"), ("NodeA", "XodeB"), ("a.b", "a_b")]
)
def test_two_node_names_never_share_one_role(fleet_url: str, first: str, second: str) -> None:
    role = admin.grant_node(fleet_url, first).role
    assert admin.node_role(second) == role
    with pytest.raises(InvalidInputError, match=f"already ships node '{first}'"):
        admin.grant_node(fleet_url, second)
    assert _grants(fleet_url) == [(first, role)]
    # So the one credential ships its own node only.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not ship for node"):
        _ship(as_role(fleet_url, role), second)
    # Granting the same node again is fine, and a role of its own serves the second node.
    admin.grant_node(fleet_url, first)
    admin.grant_node(fleet_url, second, role="podstore_node_second")
    # A node's role is not made a reader either.
    with pytest.raises(InvalidInputError, match="already ships"):
        admin.grant_reader(fleet_url, role)


def test_rename_node_never_merges_nor_half_happens(fleet_url: str) -> None:
    role_a = admin.grant_node(fleet_url, "node-a").role
    admin.grant_node(fleet_url, "node-b")
    assert _ship(as_role(fleet_url, role_a), "node-a")[1] is None
    assert _ship(fleet_url, "node-b")[1] is None
    before = _grants(fleet_url)
    stores = rows(fleet_url, "SELECT store_id, node FROM fleet_stores ORDER BY 1")
    # Into a node that exists: refused, nothing moved (a's role would write b's stores).
    with pytest.raises(InvalidInputError, match="merge two nodes"):
        admin.rename_node(fleet_url, "node-a", "node-b")
    # A node with grants but no store: refused, and its grants stay where they were.
    admin.grant_node(fleet_url, "node-c", role="podstore_node_c")
    with pytest.raises(InvalidInputError, match="no store of node 'node-c'"):
        admin.rename_node(fleet_url, "node-c", "node-d")
    assert _grants(fleet_url) == sorted([*before, ("node-c", "podstore_node_c")])
    assert rows(fleet_url, "SELECT store_id, node FROM fleet_stores ORDER BY 1") == stores
    assert admin.rename_node(fleet_url, "node-a", "node-e") == 1
    assert ("node-e", role_a) in _grants(fleet_url)


def test_a_retired_nodes_role_ships_no_new_store(fleet_url: str) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    assert _ship(as_role(fleet_url, role), "node-a")[1] is None
    admin.retire(fleet_url, node="node-a")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not ship for node"):
        _ship(as_role(fleet_url, role), "node-a")
    admin.grant_node(fleet_url, "node-a")  # given back by hand
    assert _ship(as_role(fleet_url, role), "node-a")[1] is None


def test_a_node_role_holds_a_few_connections_and_short_sessions(fleet_url: str) -> None:
    role = admin.grant_node(fleet_url, "node-a").role
    url = as_role(fleet_url, role)
    held = [connect(url) for _ in range(admin.NODE_CONNECTIONS)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            connect(url)
        # Everybody else still gets in.
        with connect(fleet_url) as other:
            assert other.execute("SELECT 1").fetchone() == (1,)
        assert held[0].execute("SHOW statement_timeout").fetchone() == ("5min",)
        assert held[0].execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("5min",)
    finally:
        for conn in held:
            conn.close()


def test_grant_reader_login_makes_an_existing_role_log_in(fleet_url: str) -> None:
    admin.grant_reader(fleet_url, "auditor")
    assert rows(fleet_url, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'auditor'") == [
        (False,)
    ]
    admin.grant_reader(fleet_url, "auditor", login=True)
    assert rows(fleet_url, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'auditor'") == [
        (True,)
    ]


def test_fleet_init_warns_when_the_owner_can_reach_server_programs(empty_url: str) -> None:
    from click.testing import CliRunner

    from podstore.cli import cli
    from podstore.fleet import migrate

    with connect(empty_url) as conn:
        conn.execute("CREATE ROLE fleet_owner_cr LOGIN CREATEROLE")
        conn.execute("CREATE ROLE fleet_owner_plain LOGIN")
        conn.execute("GRANT CREATE ON SCHEMA public TO fleet_owner_cr, fleet_owner_plain")
        conn.commit()
    as_superuser = CliRunner().invoke(cli, ["fleet", "init", "--url", empty_url])
    assert as_superuser.exit_code == 0 and "is a superuser" in as_superuser.output
    migrate.downgrade(empty_url, "base")
    with connect(empty_url) as conn:
        conn.execute("DROP TABLE fleet_alembic_version")  # the next owner makes its own
        conn.commit()
    report = migrate.init(as_role(empty_url, "fleet_owner_cr"))
    version = rows(empty_url, "SELECT current_setting('server_version_num')::int")[0][0]
    if version < 160000:
        assert len(report.warnings) == 1 and "CREATEROLE" in report.warnings[0]
    migrate.downgrade(as_role(empty_url, "fleet_owner_cr"), "base")
    with connect(as_role(empty_url, "fleet_owner_cr")) as conn:
        conn.execute("DROP TABLE fleet_alembic_version")
        conn.commit()
    assert migrate.init(as_role(empty_url, "fleet_owner_plain")).warnings == ()


def test_fleet_sql_with_the_owners_url_runs_as_the_reader(empty_url: str) -> None:
    from podstore.fleet import migrate, read

    with connect(empty_url) as conn:
        conn.execute("CREATE ROLE fleet_owner_sql LOGIN CREATEROLE")
        conn.execute("GRANT CREATE ON SCHEMA public TO fleet_owner_sql")
        conn.commit()
    owner = as_role(empty_url, "fleet_owner_sql")
    migrate.init(owner)
    admin.grant_reader(owner, "podstore_reader")
    assert read.query(owner, "SELECT current_user").rows == [("podstore_reader",)]
    with pytest.raises(Exception, match="permission denied for function"):  # as the reader
        read.query(owner, "SELECT fleet_ship_open(gen_random_uuid(), 'n')")


def test_the_fleet_sql_timeout_counts_for_the_whole_statement(fleet_url: str) -> None:
    """A reader that paces its fetches (each one quick) is stopped once the whole statement
    has run its timeout, not one fetch's worth of it each time."""
    import time

    from podstore import FleetError
    from podstore.fleet import read

    with read.stream(
        fleet_url, "SELECT g FROM generate_series(1, 100000) AS g", timeout=1.0
    ) as result:
        rows_seen = iter(result)
        assert next(rows_seen) == (1,)
        time.sleep(1.2)  # the timeout is spent, whatever the load: no fetch may run now
        with pytest.raises(FleetError, match="past its timeout of 1 s"):
            for _ in rows_seen:
                pass


def _registrations(path: Path, devices: int) -> PodStore:
    store = PodStore.open(path, durability="normal")
    for first in (0, 1):  # two registrations, one device apart
        names = [f"GPU-{i:05d}" for i in range(first, first + devices)]
        store.set_registered_devices({"nvidia.com/gpu": names})
    return store


def test_fleet_verify_is_linear_in_the_devices_an_event_lists(
    fleet_url: str, tmp_path: Path
) -> None:
    """Two `registered` events of 29,000 devices took `fleet verify` 63 s (a quadratic jsonb
    containment). Timed against the same check at a tenth of the size, in this run: linear
    is ~10x (less, with the fixed cost), quadratic ~100x."""
    import statistics
    import time

    from podstore.fleet import read
    from podstore.fleet.ship import ship

    for node, devices in (("small", 2_900), ("big", 29_000)):
        with _registrations(tmp_path / f"{node}.db", devices) as store:
            assert ship(store, fleet_url, node=node).shipped == 2

    def took(node: str) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            (row,) = read.verify(fleet_url, node=node).dicts()
            times.append(time.perf_counter() - start)
            assert row["problem"] is None and row["events"] == 2
        return statistics.median(times)

    small, big = took("small"), took("big")
    assert big < 40 * small, (big, small)


def test_a_grant_says_whether_it_created_the_role_and_refuses_a_superuser(fleet_url: str) -> None:
    reader = "reader_" + uuid.uuid4().hex[:8]
    assert admin.grant_reader(fleet_url, reader).created
    assert not admin.grant_reader(fleet_url, reader).created
    boss = "boss_" + uuid.uuid4().hex[:8]
    with connect(fleet_url) as conn:
        conn.execute(f"CREATE ROLE {boss} SUPERUSER")
        conn.commit()
    with pytest.raises(InvalidInputError, match="is a superuser: it cannot be restricted"):
        admin.grant_node(fleet_url, "node-s", role=boss)
    assert _grants(fleet_url) == []  # nothing was granted
