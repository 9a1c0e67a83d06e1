"""``podstore sql "SELECT ..."``: read-only SQL over the tables and views (docs/sql.md)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.output import F, emit, output_option
from podstore.errors import QueryLimitError


def _params(_ctx: click.Context, _p: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected name=value, got {item!r}")
        params[name] = value
    return params


def param_option(binding: str) -> Callable[[F], F]:
    """``-p/--param NAME=VALUE`` (repeatable) into a dict ``params``; ``binding`` says how the
    database types the values (``podstore sql`` and ``podstore fleet sql``)."""
    return click.option(
        "-p",
        "--param",
        "params",
        multiple=True,
        metavar="NAME=VALUE",
        callback=_params,
        help=f"Bind :NAME to VALUE ({binding}). Repeatable.",
    )


def unique_columns(columns: tuple[str, ...]) -> list[str]:
    """Column names made unique (``id``, ``id_2``), so no value is lost in a keyed row."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for name in columns:
        n = seen.get(name, 0) + 1
        seen[name] = n
        out.append(name if n == 1 else f"{name}_{n}")
    return out


def _value(value: Any) -> Any:
    # BLOBs (alloc_resp) as base64, as in a kubelet checkpoint.
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


MAX_ROWS = click.option(
    "--max-rows",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Stop with exit 1 if the statement returns more than N rows.",
)

#: ``podstore sql --timeout`` default: seconds of SQLite's work a statement may take.
DEFAULT_TIMEOUT = 5.0


@click.command()
@click.argument("query")
@param_option("text; SQLite applies column affinity")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Stop the statement after this much work (0: no limit); exit 1.",
)
@MAX_ROWS
@output_option
@click.pass_obj
def sql(
    ctx: Context,
    query: str,
    params: dict[str, str],
    timeout: float,
    max_rows: int | None,
    output: str,
) -> None:
    """Run one read-only SQL statement and print its rows as they come.

    The connection can only read: the file is opened read-only, with PRAGMA query_only and an
    authorizer that refuses every write, ATTACH/DETACH and any PRAGMA that sets a value.
    A refused statement exits with status 1 and changes nothing. BLOB values print as base64.

    --timeout counts the time SQLite spends computing rows (not the time a slow reader of the
    output takes); a statement past it, or past --max-rows, is stopped with exit status 1 —
    the rows printed before that are an incomplete answer.
    """
    store = ctx.store(readonly=True)
    stopped: list[QueryLimitError] = []
    with store.stream(query, params, timeout=timeout or None, max_rows=max_rows) as rows:
        columns = unique_columns(rows.columns)
        emit(
            (
                dict(zip(columns, map(_value, row), strict=True))
                for row in _until_limit(rows, stopped)
            ),
            columns,
            output,
        )
    if stopped:
        raise stopped[0]


def _until_limit(rows: Iterable[Any], stopped: list[QueryLimitError]) -> Iterator[Any]:
    """``rows`` until a limit stops them: the rows before it still make a whole document
    (a JSON array closed, the last table window printed), and the error is raised after."""
    try:
        yield from rows
    except QueryLimitError as exc:
        stopped.append(exc)
