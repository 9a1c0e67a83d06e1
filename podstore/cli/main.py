"""The ``podstore`` command group, its shared options and error handling.

Exit codes: 0 success, 1 a failed check or something not found, 2 bad usage (click's own).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from podstore.cli.context import Context
from podstore.errors import PodStoreError

DEFAULT_DB = "podstore.db"


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


# Commands register themselves on `cli` when their modules are imported.
from podstore.cli import checkpoint as _checkpoint  # noqa: E402,F401
from podstore.cli import devices as _devices  # noqa: E402,F401
from podstore.cli import history as _history  # noqa: E402,F401
from podstore.cli import migrate as _migrate  # noqa: E402,F401
from podstore.cli import pods as _pods  # noqa: E402,F401
from podstore.cli import run_options as _run_options  # noqa: E402,F401
from podstore.cli import sql as _sql  # noqa: E402,F401
from podstore.cli import status as _status  # noqa: E402,F401
from podstore.cli import verify as _verify  # noqa: E402,F401
