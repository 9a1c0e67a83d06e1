"""The ``podstore`` command group, its shared options and error handling.

Exit codes: 0 success, 1 a failed check or something not found, 2 bad usage (click's own).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from podstore.cli import (
    checkpoint,
    devices,
    fleet,
    history,
    metrics,
    migrate,
    pods,
    run_options,
    ship,
    sql,
    status,
    verify,
    watch,
)
from podstore.cli.context import DEFAULT_DB, Context
from podstore.errors import PodStoreError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "db",
    metavar="PATH",
    default=lambda: os.environ.get("PODSTORE_DB") or DEFAULT_DB,
    show_default="$PODSTORE_DB, else ./podstore.db",
    help="The store: a file path or an sqlite:/// URL.",
)
@click.version_option(package_name="podstore")
@click.pass_context
def cli(ctx: click.Context, db: str) -> None:
    """podstore: kubelet device allocations (podDevices) in a crash-safe SQLite store."""
    ctx.obj = Context(db=db)
    ctx.call_on_close(ctx.obj.close)


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: podstore errors become one line on stderr and exit code 1."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="podstore")
    except PodStoreError as exc:
        click.echo(f"podstore: error: {exc}", err=True)
        sys.exit(1)


# Each command module defines its commands and knows nothing of this group; the group is
# assembled here.
for _command in (
    status.status,
    checkpoint.import_,
    checkpoint.export,
    checkpoint.verify_checkpoint,
    pods.pods,
    pods.get,
    devices.devices,
    devices.owners,
    run_options.run_options,
    history.history_,
    sql.sql,
    verify.verify_command,
    migrate.migrate,
    watch.watch,
    metrics.metrics,
    ship.ship,
    fleet.fleet,
):
    cli.add_command(_command)
