"""The ``podstore`` command group and its error handling: a ``PodStoreError`` is one line
and exit 1 (README "Exit codes")."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

import click

from podstore import __version__, logs
from podstore.cli.context import Context
from podstore.cli.global_options import PodstoreGroup, global_options
from podstore.errors import PodStoreError

# Each command module defines its commands and knows nothing of this group; the group names
# them here and imports a module only when one of its commands runs (or for --help).
COMMANDS = {
    "status": "status:status",
    "import": "checkpoint:import_",
    "export": "checkpoint:export",
    "verify-checkpoint": "checkpoint:verify_checkpoint",
    "import-node": "node:import_node",
    "topology": "node:topology",
    "pods": "pods:pods",
    "get": "pods:get",
    "devices": "devices:devices",
    "owners": "devices:owners",
    "run-options": "run_options:run_options",
    "history": "history:history_",
    "usage": "usage:usage",
    "prune": "prune:prune",
    "sql": "sql:sql",
    "verify": "verify:verify_command",
    "reset-identity": "identity:reset_identity",
    "migrate": "migrate:migrate",
    "preflight": "preflight:preflight",
    "watch": "watch:watch",
    "metrics": "metrics:metrics",
    "ship": "ship:ship",
    "fleet": "fleet:fleet",
}


@click.group(
    cls=PodstoreGroup,
    lazy={name: f"podstore.cli.{where}" for name, where in COMMANDS.items()},
    params=global_options(True),
    context_settings={"help_option_names": ["-h", "--help"]},
)
# The version is the package's own constant: looking it up in the installed metadata
# (importlib.metadata) costs more than the rest of `podstore --version`.
@click.version_option(__version__, prog_name="podstore")
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
