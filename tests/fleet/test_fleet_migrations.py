"""The central schema's migrations on a real PostgreSQL: upgrade from empty, downgrade,
upgrade again; the result matches the SQLAlchemy MetaData and the views' text."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import sqlalchemy as sa
from click.testing import CliRunner
from harness.fleetlib import rows

from podstore.cli import cli
from podstore.fleet import db, migrate, schema, views
from podstore.fleet.urls import resolve

TABLES = {t.name for t in schema.metadata.sorted_tables}
VIEWS = {name for name, _ in views.VIEWS}


def _relations(url: str) -> set[str]:
    found = rows(
        url,
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'public' AND table_name LIKE '%fleet%'",
    )
    return {r[0] for r in found}


def _diff(url: str) -> list[Any]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with db.transaction(resolve(url)) as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
        return list(compare_metadata(ctx, schema.metadata))


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    assert _relations(empty_url) == set()
    report = migrate.init(empty_url)
    assert (report.before, report.after) == (None, migrate.HEAD_REVISION)
    assert _relations(empty_url) == TABLES | VIEWS | {schema.VERSION_TABLE}
    assert _diff(empty_url) == []
    down = migrate.downgrade(empty_url, "base")
    assert (down.before, down.after) == (migrate.HEAD_REVISION, None)
    assert _relations(empty_url) == {schema.VERSION_TABLE}  # Alembic leaves it, empty
    again = migrate.init(empty_url)
    assert again.after == migrate.HEAD_REVISION and again.changed
    assert _diff(empty_url) == []
    assert not migrate.init(empty_url).changed  # idempotent


def test_head_constant_is_alembic_head() -> None:
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_every_primary_key_begins_with_store_id(fleet_url: str) -> None:
    found = rows(
        fleet_url,
        "SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c "
        "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
        "WHERE c.contype = 'p' AND c.conrelid::regclass::text LIKE 'fleet%' "
        "AND c.conrelid::regclass::text <> :version",
        {"version": schema.VERSION_TABLE},
    )
    per_store = TABLES - schema.NOT_PER_STORE
    assert {r[0] for r in found} == TABLES
    assert {r[1] for r in found if r[0] in per_store} == {"store_id"}
    for table in schema.metadata.sorted_tables:
        if table.name in per_store:
            assert next(iter(table.primary_key.columns)).name == "store_id", table.name
    # The one exception: which role ships for which node, a handful of rows.
    assert set(schema.NOT_PER_STORE) == {"fleet_node_grants"}


def test_views_hold_exactly_the_text_of_views_py(fleet_url: str) -> None:
    # The same text created under another schema normalises to the same definition.
    with db.transaction(resolve(fleet_url)) as conn:
        conn.execute(sa.text("CREATE SCHEMA probe"))
        conn.execute(sa.text("SET LOCAL search_path = probe, public"))
        for name, create in views.VIEWS:
            conn.execute(sa.text(create.replace(f"VIEW {name}", f"VIEW probe.{name}")))
        for name, _ in views.VIEWS:
            mine, stored = (
                conn.execute(
                    sa.text("SELECT pg_get_viewdef(CAST(:v AS regclass), true)"), {"v": v}
                ).scalar_one()
                for v in (f"probe.{name}", f"public.{name}")
            )
            # A view on a view names it with its schema where search_path does not find it.
            assert mine.replace("probe.", "") == stored.replace("public.", ""), name
        conn.execute(sa.text("DROP SCHEMA probe CASCADE"))


def test_fleet_init_command_is_idempotent_and_concurrent(empty_url: str) -> None:
    # Two processes at once (CliRunner swaps sys.stdout, so not two threads).
    argv = [sys.executable, "-c", "from podstore.cli import main; main()"]
    argv += ["fleet", "init", "--url", empty_url]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(*p.communicate(timeout=120), p.returncode) for p in procs]
    assert [r[2] for r in results] == [0, 0], results
    outputs = sorted(r[0] for r in results)
    assert "already at revision" in outputs[0] and "created at revision" in outputs[1]
    assert _diff(empty_url) == []
    again = CliRunner().invoke(cli, ["fleet", "init", "--url", empty_url])
    assert again.exit_code == 0 and f"already at revision {migrate.HEAD_REVISION}" in again.output


# What revision f0001 held for two stores (as its shipping wrote it): events, current state, a
# snapshot.
F0001_DATA = [
    "INSERT INTO fleet_stores (store_id, node, last_seq, last_shipped_at) VALUES "
    "('11111111-1111-4111-8111-111111111111', 'old-a', 3, now()), "
    "('22222222-2222-4222-8222-222222222222', 'old-b', 5, now())",
    "INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource, device_ids, "
    "devices) SELECT CAST('11111111-1111-4111-8111-111111111111' AS uuid), g, "
    "now() - interval '1 hour' + g * interval '1 second', 'insert', 'p' || g, 'c', 'gpu', "
    "jsonb_build_object('0', jsonb_build_array('G' || g)), ARRAY['G' || g] "
    "FROM generate_series(1, 3) g",
    "INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource, device_ids, "
    "devices) SELECT CAST('22222222-2222-4222-8222-222222222222' AS uuid), g, now(), 'insert', "
    "'q', 'c', 'gpu', '{\"0\": [\"X\"]}', ARRAY['X'] FROM generate_series(4, 5) g",
    "INSERT INTO fleet_entries (store_id, pod_uid, container, resource, device_ids, seq) "
    "SELECT CAST('11111111-1111-4111-8111-111111111111' AS uuid), 'p' || g, 'c', 'gpu', "
    "jsonb_build_object('0', jsonb_build_array('G' || g)), g FROM generate_series(1, 3) g",
    "INSERT INTO fleet_allocations (store_id, pod_uid, container, resource, seq, numa_node, "
    "position, device_id) SELECT CAST('11111111-1111-4111-8111-111111111111' AS uuid), "
    "'p' || g, 'c', 'gpu', g, 0, 0, 'G' || g FROM generate_series(1, 3) g",
    "INSERT INTO fleet_snapshots (store_id, at_seq, after_seq, missing_events, entries, "
    "registered, ts) VALUES ('22222222-2222-4222-8222-222222222222', 3, 0, 3, 0, 0, now())",
]


def test_f0002_upgrades_and_downgrades_a_database_with_data(empty_url: str) -> None:
    from harness.fleetlib import chained, connect, entry_rows, send_batch

    migrate.upgrade(empty_url, "f0001")
    for statement in F0001_DATA:
        rows(empty_url, statement + " RETURNING 1")
    before = {
        t: rows(empty_url, f"SELECT count(*) FROM {t}")[0][0]
        for t in ("fleet_stores", "fleet_events", "fleet_entries", "fleet_allocations")
    }
    report = migrate.upgrade(empty_url, "f0002")
    assert (report.before, report.after) == ("f0001", "f0002")
    # Counters filled from what was there; nothing chained yet; every store in service.
    assert rows(
        empty_url,
        "SELECT node, events, entries, device_rows, snapshots, refusals, head_hash, retired_at "
        "FROM fleet_stores ORDER BY node",
    ) == [("old-a", 3, 3, 3, 0, 0, None, None), ("old-b", 2, 0, 0, 1, 0, None, None)]
    assert rows(empty_url, "SELECT count(*) FROM v_fleet_allocations") == [(3,)]
    # The first chained batch of old-a adopts what was shipped before the chain.
    sid = "11111111-1111-4111-8111-111111111111"
    anchor = bytes(32)
    events, _ = chained(sid, entry_rows(4, 5), anchor)
    with connect(empty_url) as conn:
        assert send_batch(conn, sid, "old-a", events, anchor) == (5, None)
    assert rows(empty_url, "SELECT seq, reason FROM fleet_chain_links") == [(4, "adopted")]
    from podstore.fleet import admin, read

    # The reads and admin commands below expect the head revision: f0003 on top of it.
    assert migrate.upgrade(empty_url).after == migrate.HEAD_REVISION
    admin.grant_reader(empty_url, "podstore_reader")
    checked = {r["node"]: r for r in read.verify(empty_url).dicts()}
    assert (checked["old-a"]["chained"], checked["old-a"]["problem"]) == (5, None)
    assert checked["old-b"]["problem"] is None  # nothing chained: nothing to break
    admin.retire(empty_url, node="old-b")

    down = migrate.downgrade(empty_url, "f0001")
    assert (down.before, down.after) == (migrate.HEAD_REVISION, "f0001")
    # f0001's shape again, and every row it knows about kept (a retired store is back in the
    # views: f0001 has no retirement).
    for table, count in before.items():
        extra = 5 if table == "fleet_events" else 0
        got = rows(empty_url, f"SELECT count(*) FROM {table}")[0][0]
        assert got >= count + extra if table != "fleet_stores" else got == count, table
    columns = {
        r[0]
        for r in rows(
            empty_url,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'fleet_stores'",
        )
    }
    assert columns == {"store_id", "node", "last_seq", "last_shipped_at", "first_shipped_at"}
    assert rows(empty_url, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'fleet%'") == [(0,)]
    assert rows(empty_url, "SELECT count(DISTINCT node) FROM v_fleet_allocations") == [(1,)]
    again = migrate.upgrade(empty_url)
    assert again.after == migrate.HEAD_REVISION and _diff(empty_url) == []
    assert rows(empty_url, "SELECT node, events FROM fleet_stores ORDER BY node") == [
        ("old-a", 8),
        ("old-b", 2),
    ]
