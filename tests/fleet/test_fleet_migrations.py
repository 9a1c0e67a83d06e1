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
    assert {r[0] for r in found} == TABLES
    assert {r[1] for r in found} == {"store_id"}
    for table in schema.metadata.sorted_tables:
        assert next(iter(table.primary_key.columns)).name == "store_id", table.name


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
    assert again.exit_code == 0 and "already at revision f0001" in again.output
