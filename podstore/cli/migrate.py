"""``podstore migrate upgrade|downgrade|current|history``: the schema by hand."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.sqlite.connection import ConnectOptions, connect, database_path
from podstore.sqlite.migrate import (
    BASE,
    current_revision,
    head_revision,
    run_downgrade,
    run_upgrade,
    script_directory,
)


@click.group()
def migrate() -> None:
    """Show or change the store's schema revision (Alembic)."""


def _options(ctx: Context) -> ConnectOptions:
    return ConnectOptions(path=database_path(ctx.db))


def _current(ctx: Context) -> str | None:
    conn = connect(_options(ctx))
    try:
        rev = current_revision(conn)
        return None if rev == BASE else rev
    finally:
        conn.close()


@migrate.command()
@click.argument("revision", default="head")
@click.pass_obj
def upgrade(ctx: Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head), in one transaction."""
    run_upgrade(_options(ctx), revision)
    click.echo(f"schema at {_current(ctx) or 'base'}")


@migrate.command()
@click.argument("revision")
@click.pass_obj
def downgrade(ctx: Context, revision: str) -> None:
    """Downgrade the schema to REVISION ('base' removes every table), in one transaction."""
    run_downgrade(_options(ctx), revision)
    click.echo(f"schema at {_current(ctx) or 'base'}")


@migrate.command()
@click.pass_obj
def current(ctx: Context) -> None:
    """Print the stored revision and whether it is the newest."""
    rev = _current(ctx)
    head = head_revision()
    click.echo(f"{rev or 'base'}" + (" (head)" if rev == head else f" (head is {head})"))


@migrate.command()
@output_option
def history(output: str) -> None:
    """List the known revisions, newest first."""
    rows: list[dict[str, Any]] = [
        {"revision": s.revision, "down_revision": s.down_revision, "message": s.doc}
        for s in script_directory().walk_revisions()
    ]
    emit(rows, ["revision", "down_revision", "message"], output)
