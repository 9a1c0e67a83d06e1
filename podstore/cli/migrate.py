"""``podstore migrate upgrade|downgrade|current|history``: the schema by hand, the target
checked first, in one transaction; a downgrade that would drop data is tried, rolled back
and refused unless ``--yes``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.cli.progress import progress
from podstore.sqlite import schema_change
from podstore.sqlite.backup import online_backup
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import HEAD_REVISION, script_directory

#: A store at least this large gets progress bars for its backup and migration steps.
LARGE_STORE_BYTES = 4 << 20

_BACKUP = click.option(
    "--backup",
    "backup",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="First copy the store to the new file FILE (SQLite online backup).",
)


@click.group()
def migrate() -> None:
    """Show or change the store's schema revision (Alembic)."""


def _large(options: ConnectOptions) -> bool:
    try:
        size = os.path.getsize(options.path)
    except OSError:
        return False
    return size >= LARGE_STORE_BYTES


def _apply(options: ConnectOptions, change: schema_change.Plan, backup: Path | None) -> None:
    large = _large(options)
    if backup is not None:
        with progress("backing up", min_units=0 if large else None) as bar:
            pages = online_backup(options, str(backup), bar)
        click.echo(f"backed up {pages} pages to {backup}")
    label = f"{change.direction} to {change.target}"
    with progress(label, min_units=0 if large else None) as bar:
        total = len(change.steps)
        schema_change.run(options, change, None if bar is None else lambda i, _rev: bar(i, total))
    click.echo(f"schema at {change.target} (was {change.current})")


@migrate.command()
@click.argument("revision", default="head")
@_BACKUP
@click.pass_obj
def upgrade(ctx: Context, revision: str, backup: Path | None) -> None:
    """Upgrade the schema to REVISION (default: head), in one transaction.

    A missing store is created. An unknown REVISION, or one older than the store's, is an
    error (exit 1) and changes nothing.
    """
    options = ctx.options(readonly=False)
    change = schema_change.plan(options, "upgrade", revision)
    if not change.steps:
        click.echo(f"schema already at {change.target}")
        return
    _apply(options, change, backup)


@migrate.command()
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Drop what the downgrade drops without asking.")
@_BACKUP
@click.pass_obj
def downgrade(ctx: Context, revision: str, yes: bool, backup: Path | None) -> None:
    """Downgrade the schema to REVISION ('base' removes every table), in one transaction.

    A downgrade that would drop data (the allocation history, decoded responses, the store
    id, whole tables with 'base') is first tried and rolled back; it lists what it would drop
    and is refused (exit 1, nothing changed) unless --yes. An unknown REVISION, or one newer
    than the store's, is an error (exit 1).
    """
    options = ctx.options(readonly=False)
    change = schema_change.plan(options, "downgrade", revision)
    if not change.steps:
        click.echo(f"schema already at {change.target}")
        return
    if not yes:
        dropped = schema_change.losses(options, change)
        if any(loss.drops_data for loss in dropped):
            click.echo(
                f"podstore: error: downgrading from {change.current} to {change.target} "
                "would drop:",
                err=True,
            )
            for loss in dropped:
                click.echo(f"  {loss}", err=True)
            click.echo(
                "nothing was changed; run again with --yes to drop them "
                "(--backup FILE keeps a copy of the store first)",
                err=True,
            )
            sys.exit(1)
    _apply(options, change, backup)


@migrate.command()
@click.pass_obj
def current(ctx: Context) -> None:
    """Print the stored revision and whether it is the newest (read-only; a missing store
    is an error and is not created)."""
    rev = schema_change.stored_revision(ctx.options(readonly=True))
    head = HEAD_REVISION if rev == HEAD_REVISION else schema_change.revisions()[-1]
    click.echo(rev + (" (head)" if rev == head else f" (head is {head})"))


@migrate.command()
@output_option
def history(output: str) -> None:
    """List the known revisions, newest first."""
    rows: list[dict[str, Any]] = [
        {"revision": s.revision, "down_revision": s.down_revision, "message": s.doc}
        for s in script_directory().walk_revisions()
    ]
    emit(rows, ["revision", "down_revision", "message"], output)
