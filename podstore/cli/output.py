"""One output option for every command that lists things: ``-o table|json|yaml|csv``.

Rows are dicts with the same keys in the same order. JSON output is a list of objects with
stable key order (the column order), so scripts can rely on it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import yaml
from tabulate import tabulate

FORMATS = ("table", "json", "yaml", "csv")

F = TypeVar("F", bound=Callable[..., Any])


def output_option(fn: F) -> F:
    """Add ``-o/--output`` to a command; the command receives ``output: str``."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(fn)


def _cell(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return "" if value is None else value


def render(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str) -> str:
    """Rows in the chosen format (no trailing newline for table, csv ends its lines)."""
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in columns} for r in rows], indent=2)
    if fmt == "yaml":
        out: str = yaml.safe_dump(
            [{c: r.get(c) for c in columns} for r in rows], sort_keys=False, allow_unicode=True
        )
        return out.rstrip("\n")
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for r in rows:
            writer.writerow([_cell(r.get(c)) for c in columns])
        return buf.getvalue().rstrip("\n")
    if not rows:
        return "(none)"
    table: str = tabulate(
        [[_cell(r.get(c)) for c in columns] for r in rows],
        headers=[c.upper() for c in columns],
        tablefmt="plain",
        disable_numparse=True,
    )
    return table


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str) -> None:
    click.echo(render(rows, columns, fmt))
