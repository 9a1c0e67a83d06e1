"""``podstore fleet init|nodes|owners|sql``: the central PostgreSQL database (docs/fleet.md).

``podstore.fleet`` (and with it the PostgreSQL driver) is imported inside the commands only, so
the node commands never load it.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from podstore.cli.common import parse_time
from podstore.cli.output import F, emit, output_option
from podstore.cli.sql import param_option, unique_columns

if TYPE_CHECKING:
    from podstore.types import QueryResult

#: The environment variable the fleet commands read when --url is not given.
URL_ENV = "PODSTORE_FLEET_URL"


def fleet_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    """Option callback: the fleet database URL, else $PODSTORE_FLEET_URL; neither is a usage
    error (exit 2)."""
    url = value or os.environ.get(URL_ENV)
    if not url:
        raise click.BadParameter(f"give a postgresql:// URL or set ${URL_ENV}")
    return url


def url_option(*names: str) -> Callable[[F], F]:
    """The fleet database option (``--url``, ``--to`` for ship), checked by :func:`fleet_url`."""
    return click.option(
        *names,
        "url",
        metavar="URL",
        default=None,
        callback=fleet_url,
        help="The fleet database: postgresql://user@host:port/db (or a unix-socket form); "
        f"default ${URL_ENV}. A password in it is never printed.",
    )


def _plain(value: Any, fmt: str) -> Any:
    """A PostgreSQL value as the output formats take it."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (dict, list)) and fmt in ("table", "csv"):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def emit_result(result: QueryResult, fmt: str) -> None:
    columns = unique_columns(result.columns)
    rows = [dict(zip(columns, (_plain(v, fmt) for v in row), strict=True)) for row in result.rows]
    emit(rows, columns, fmt)


@click.group()
def fleet() -> None:
    """The fleet database: every node's history and current state in one PostgreSQL."""


@fleet.command()
@url_option("--url")
def init(url: str) -> None:
    """Create the central schema, or upgrade it to this podstore's revision (idempotent)."""
    from podstore.fleet import migrate
    from podstore.fleet.urls import resolve

    target = resolve(url)
    report = migrate.init(target)
    if report.before is None:
        what = f"created at revision {report.after}"
    elif report.changed:
        what = f"upgraded from revision {report.before} to {report.after}"
    else:
        what = f"already at revision {report.after}"
    click.echo(f"fleet database {target.shown}: schema {what}")


@fleet.command()
@url_option("--url")
@output_option
def nodes(url: str, output: str) -> None:
    """List the stores shipped here: node, store_id, last_seq, last_shipped_at and counts of
    events, entries, device rows and snapshots."""
    from podstore.fleet import read

    emit_result(read.nodes(url), output)


@fleet.command()
@click.argument("device_id")
@url_option("--url")
@click.option("--node", default=None, metavar="NAME", help="Only stores of this node.")
@click.option(
    "--at",
    "at",
    callback=parse_time,
    default=None,
    help="Who held it at this instant (ISO 8601; UTC unless an offset is given), from the "
    "shipped history.",
)
@output_option
def owners(device_id: str, url: str, node: str | None, at: str | None, output: str) -> None:
    """List who holds DEVICE_ID now — or held it --at a past time — on every node.

    No holder is an empty answer, not an error (exit status 0).
    """
    from podstore.fleet import read

    emit_result(read.owners(url, device_id, node=node, at=at), output)


@fleet.command("sql")
@click.argument("query")
@url_option("--url")
@param_option("sent as text of unknown type; PostgreSQL infers it")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.001),
    default=30.0,
    show_default=True,
    help="Seconds the statement may run.",
)
@output_option
def sql(query: str, url: str, params: dict[str, str], timeout: float, output: str) -> None:
    """Run one read-only SQL statement on the fleet database and print its rows.

    It runs as a single prepared statement in a READ ONLY transaction with a statement
    timeout: any write is refused (exit status 1) and changes nothing. Write casts of
    parameters as (:NAME)::type or CAST(:NAME AS type).
    """
    from podstore.fleet import read

    emit_result(read.query(url, query, params, timeout=timeout), output)
