"""``podstore verify``: SQLite's integrity check plus the store's own invariants."""

from __future__ import annotations

import sys

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.storage.selfcheck import check_store, has_errors

COLUMNS = ("severity", "check", "message")


@click.command("verify")
@click.option(
    "--quick",
    is_flag=True,
    help="PRAGMA quick_check (b-tree structure) instead of the full integrity_check.",
)
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too, not only on errors.")
@output_option
@click.pass_obj
def verify_command(ctx: Context, quick: bool, strict: bool, output: str) -> None:
    """Check the store file (read-only): integrity and invariants; exit 1 on any error.

    Reports `integrity_check` (or `quick_check`) failures, orphan rows, pods or containers
    left without entries, device positions that are not 0..n-1, and a schema not at the
    newest revision as errors; a device listed twice in one NUMA list as a warning.
    """
    findings = check_store(ctx.db, quick=quick)
    if findings or output != "table":
        emit([f.as_dict() for f in findings], COLUMNS, output)
    if output == "table":
        errors = sum(f.severity == "error" for f in findings)
        click.echo(
            f"{ctx.db}: ok"
            if not findings
            else f"{ctx.db}: {errors} error(s), {len(findings) - errors} warning(s)",
            err=bool(findings),
        )
    if has_errors(findings) or (strict and findings):
        sys.exit(1)
