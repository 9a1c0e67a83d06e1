"""The ``podstore`` command group, its shared options and error handling.

Exit codes, the same for every command (README "Exit codes"): 0 success; 1 a failed check, a
refusal or an error (a ``PodStoreError``, printed here as one line); 2 bad usage (click's
own) and a missing optional extra (``cli/extras.py``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

import click

from podstore import logs
from podstore.cli import (
    checkpoint,
    devices,
    fleet,
    history,
    identity,
    metrics,
    migrate,
    node,
    pods,
    prune,
    run_options,
    ship,
    sql,
    status,
    verify,
    watch,
)
from podstore.cli.context import Context
from podstore.cli.global_options import PodstoreGroup, group_options
from podstore.errors import PodStoreError


@click.group(cls=PodstoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@group_options
@click.version_option(package_name="podstore")
@click.pass_context
def cli(ctx: click.Context, db: str, readonly: bool, busy_timeout: float) -> None:
    """podstore: kubelet device allocations (podDevices) in a crash-safe SQLite store.

    The global options --db, --readonly, --busy-timeout and --log-format may also follow
    the command. Exit status: 0 success, 1 a failed check, a refusal or an error, 2 bad usage
    or a missing optional extra.
    """
    ctx.obj = Context(db=db, readonly=readonly, busy_timeout=busy_timeout)
    ctx.call_on_close(ctx.obj.close)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # A warning is for the operator: one line, not Python's file:line report.
    logs.say("warning", str(message))


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: podstore errors become one line on stderr and exit code 1."""
    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="podstore")
    except PodStoreError as exc:
        logs.say("error", str(exc), error=type(exc).__name__)
        sys.exit(1)
    finally:
        warnings.showwarning = shown


# Each command module defines its commands and knows nothing of this group; the group is
# assembled here.
for _command in (
    status.status,
    checkpoint.import_,
    checkpoint.export,
    checkpoint.verify_checkpoint,
    node.import_node,
    node.topology,
    pods.pods,
    pods.get,
    devices.devices,
    devices.owners,
    run_options.run_options,
    history.history_,
    prune.prune,
    sql.sql,
    verify.verify_command,
    identity.reset_identity,
    migrate.migrate,
    watch.watch,
    metrics.metrics,
    ship.ship,
    fleet.fleet,
):
    cli.add_command(_command)
