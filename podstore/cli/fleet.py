"""``podstore fleet …``: the central PostgreSQL database (docs/fleet.md). ``podstore.fleet``
is imported inside the commands only, so the node commands never load the driver."""

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
from podstore.cli.extras import require
from podstore.cli.output import F, emit, output_option
from podstore.cli.sql import MAX_ROWS, param_option, unique_columns

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from podstore.fleet.admin import GrantReport
    from podstore.types import QueryResult

#: The environment variable the fleet commands read when --url is not given.
URL_ENV = "PODSTORE_FLEET_URL"


def fleet_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    """Option callback: the URL, else $PODSTORE_FLEET_URL; neither is a usage error."""
    url = value or os.environ.get(URL_ENV)
    if not url:
        raise click.BadParameter(f"give a postgresql:// URL or set ${URL_ENV}")
    if value:
        warn_argv_password(value)
    return url


def warn_argv_password(url: str) -> None:
    """Warn when a URL on the command line holds a password (every local user reads ``ps``)."""
    import importlib.util

    from podstore.errors import InvalidInputError
    from podstore.fleet.urls import resolve

    if importlib.util.find_spec("psycopg") is None:
        return  # the command exits 2 for the missing driver, in one line

    try:
        password = resolve(url).password  # the URL parser's reading, as the driver's
    except InvalidInputError:
        return  # reported by the command, with the URL masked
    if password is not None:
        click.echo(
            "podstore: warning: the URL on the command line holds a password, which every "
            f"local user can read (ps) while this runs; use ${URL_ENV}, ~/.pgpass, or a file "
            "(ship --to-file)",
            err=True,
        )


def url_option(*names: str) -> Callable[[F], F]:
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


def emit_rows(names: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str) -> int:
    """Write rows (any iterable, streamed) in the output format; returns how many."""
    columns = unique_columns(tuple(names))
    return emit(
        (dict(zip(columns, (_plain(v, fmt) for v in row), strict=True)) for row in rows),
        columns,
        fmt,
    )


def emit_result(result: QueryResult, fmt: str) -> None:
    emit_rows(result.columns, result.rows, fmt)


def driver() -> None:
    require("psycopg", "podstore fleet", extra="fleet")


@click.group()
def fleet() -> None:
    """The fleet database: every node's history and current state in one PostgreSQL."""


@fleet.command()
@url_option("--url")
def init(url: str) -> None:
    """Create the central schema, or upgrade it to this podstore's revision (idempotent)."""
    driver()
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
    for warning in report.warnings:
        click.echo(f"podstore: warning: {warning}", err=True)


@fleet.command()
@url_option("--url")
@output_option
def nodes(url: str, output: str) -> None:
    """List the stores shipped here: node, store_id, last_seq, last_shipped_at, counts of
    events, entries, device rows and snapshots, the ships refused (and the last reason), and
    when a store was retired."""
    driver()
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

    No holder is an empty answer, not an error (exit status 0). Retired stores hold nothing
    now; --at an instant before a store's retirement still sees it.
    """
    driver()
    from podstore.fleet import read

    emit_result(read.owners(url, device_id, node=node, at=at), output)


@fleet.command()
@url_option("--url")
@click.option(
    "--by",
    type=click.Choice(["namespace", "node", "physical", "pod", "resource"]),
    default="namespace",
    show_default=True,
    help="What a row adds up (a pod and a physical device are a node's own).",
)
@click.option(
    "--since", callback=parse_time, default=None, help="The window's start (default: all)."
)
@click.option("--until", callback=parse_time, default=None, help="The window's end (default: now).")
@click.option("--resource", metavar="R", default=None, help="Only resource R (or DRA driver R).")
@output_option
def usage(
    url: str, by: str, since: str | None, until: str | None, resource: str | None, output: str
) -> None:
    """Device-seconds and device-hours per group over a window, from every store's allocation
    intervals, as `podstore usage` counts them on a node (retired stores left out)."""
    driver()
    from podstore.fleet import read
    from podstore.pure.times import format_ts

    end = until if until is not None else format_ts(datetime.datetime.now(datetime.UTC))
    start = since if since is not None else "0001-01-01T00:00:00.000000Z"
    if start >= end:
        raise click.BadParameter("--since must be before --until", param_hint="'--since'")
    result = read.usage(url, by=by, since=start, until=end, resource=resource)
    keys = result.columns[:-2]
    rows = (
        (*row[:-2], round(float(row[-2]), 3), round(float(row[-2]) / 3600.0, 6), int(row[-1]))
        for row in result.rows
    )
    emit_rows([*keys, "device_seconds", "device_hours", "intervals"], rows, output)


@fleet.command("sql")
@click.argument("query")
@url_option("--url")
@param_option("sent as text of unknown type; PostgreSQL infers it")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.001),
    default=30.0,
    show_default=True,
    help="Seconds each fetch of the statement may run on the server.",
)
@MAX_ROWS
@click.option(
    "--reader-role",
    default="podstore_reader",
    show_default=True,
    metavar="ROLE",
    help="The role the statement runs as (podstore fleet grant-reader creates it).",
)
@output_option
def sql(
    query: str,
    url: str,
    params: dict[str, str],
    timeout: float,
    max_rows: int | None,
    reader_role: str,
    output: str,
) -> None:
    """Run one read-only SQL query on the fleet database and print its rows as they come.

    PostgreSQL itself refuses anything but reading: the query runs in a READ ONLY transaction
    with a statement timeout, after SET LOCAL ROLE to the reader role (SELECT on the fleet's
    tables and views only: no COPY to or from programs or server files, no server-file
    functions, no signalling other sessions, no locks beyond reading, no writes), as the
    query of a server-side cursor (one query: SELECT, VALUES, TABLE or WITH; a second
    statement is refused). With a superuser URL and no reader role it refuses to run (exit
    1): create the role with `podstore fleet grant-reader podstore_reader --url OWNER_URL`.
    A refused statement exits with status 1 and changes nothing; past --max-rows or the
    timeout the rows printed before are an incomplete answer (exit 1). Write casts of
    parameters as (:NAME)::type or CAST(:NAME AS type).
    """
    driver()
    from podstore.fleet import read

    with read.stream(
        url, query, params, timeout=timeout, max_rows=max_rows, reader_role=reader_role
    ) as rows:
        emit_rows(rows.columns, rows, output)


@fleet.command()
@url_option("--url")
@click.option("--node", default=None, metavar="NAME", help="Only the stores of this node.")
@output_option
def verify(url: str, node: str | None, output: str) -> None:
    """Re-check every shipped store's hash chain from what the fleet holds.

    One row per store: its events, how many are chained, and — for a store whose chain is
    broken (an event edited, deleted or added centrally, a hash or link changed) — the first
    broken seq and what is wrong there. Exit status 1 when any store is broken.
    """
    driver()
    from podstore.fleet import read

    result = read.verify(url, node=node)
    emit_result(result, output)
    broken = [row for row in result.rows if row[-1] is not None]
    if broken:
        click.echo(
            f"podstore: error: fleet verify: {len(broken)} of {len(result.rows)} stores have a "
            "broken chain",
            err=True,
        )
        raise SystemExit(1)


def _owner_url(url: str | None, print_sql: bool) -> str | None:
    found = url or os.environ.get(URL_ENV)
    if not found and not print_sql:
        raise click.UsageError(f"give --url OWNER_URL or set ${URL_ENV}")
    return found


def _print_statements(statements: list[str]) -> None:
    click.echo("BEGIN;")
    for statement in statements:
        click.echo(statement.rstrip() + ";")
    click.echo("COMMIT;")


_OWNER_URL_HELP = (
    "The fleet database as its owner (the role that ran fleet init) or a superuser; default "
    "$PODSTORE_FLEET_URL. Not needed with --print-sql."
)


_TEMP_FILE_LIMIT = click.option(
    "--temp-file-limit",
    default="1GB",
    show_default=True,
    metavar="SIZE",
    help="Temporary file space one statement of the role may fill (as a superuser: a setting "
    "the role cannot lift).",
)


@fleet.command("grant-node")
@click.argument("node")
@click.option("--url", "url", metavar="OWNER_URL", default=None, help=_OWNER_URL_HELP)
@click.option(
    "--role",
    default=None,
    metavar="NAME",
    help="The role's name (default: podstore_node_ and the node name with every character "
    "outside [a-z0-9_] as _).",
)
@_TEMP_FILE_LIMIT
@click.option("--print-sql", is_flag=True, help="Print the SQL instead of running it.")
def grant_node(
    node: str, url: str | None, role: str | None, temp_file_limit: str, print_sql: bool
) -> None:
    """Create the login role that ships NODE's stores and can do nothing else.

    The role gets EXECUTE on the three shipping functions (and SELECT on the schema's version
    table): PostgreSQL refuses it every other write — UPDATE, DELETE, TRUNCATE, INSERT into
    any table, another node's stores, new objects. How it logs in (a password, a
    certificate) is the server's configuration. As a superuser it also bounds the role's
    temporary files and revokes large objects from PUBLIC in the fleet database.
    """
    from podstore.fleet import admin

    target = _owner_url(url, print_sql)
    if print_sql:
        _print_statements(admin.grant_node_sql(node, role, temp_file_limit=temp_file_limit))
        return
    driver()
    report = admin.grant_node(target, node, role=role, temp_file_limit=temp_file_limit)
    _report_grant(report, f"ships the stores of node {node} and nothing else")


@fleet.command("grant-reader")
@click.argument("role")
@click.option("--url", "url", metavar="OWNER_URL", default=None, help=_OWNER_URL_HELP)
@click.option("--login", is_flag=True, help="Create the role with LOGIN (default NOLOGIN).")
@_TEMP_FILE_LIMIT
@click.option("--print-sql", is_flag=True, help="Print the SQL instead of running it.")
def grant_reader(
    role: str, url: str | None, login: bool, temp_file_limit: str, print_sql: bool
) -> None:
    """Create ROLE if missing and give it SELECT on the fleet's tables and views only.

    `podstore fleet sql` runs statements as this role (default podstore_reader). As a
    superuser it also revokes set_config() from PUBLIC in the fleet database, so that a
    statement cannot switch back to the role of the URL it was sent with, revokes large
    objects from PUBLIC, and bounds the role's temporary files.
    """
    from podstore.fleet import admin

    target = _owner_url(url, print_sql)
    if print_sql:
        _print_statements(
            admin.grant_reader_sql(role, login=login, temp_file_limit=temp_file_limit)
        )
        return
    driver()
    report = admin.grant_reader(target, role, login=login, temp_file_limit=temp_file_limit)
    _report_grant(report, "reads the fleet's tables and views and nothing else")


def _report_grant(report: GrantReport, what: str) -> None:
    done = "created" if report.created else "already existed; its rights were set"
    click.echo(f"role {report.role} {done}: it {what}")
    for warning in report.warnings:
        click.echo(f"podstore: warning: {warning}", err=True)


@fleet.command("rename-node")
@click.argument("old")
@click.argument("new")
@url_option("--url")
def rename_node(old: str, new: str, url: str) -> None:
    """Give every store of node OLD the name NEW (and move OLD's grants to NEW).

    A store belongs to the node that first shipped it, and a ship that names another node is
    refused: after a node was renamed, rename it here too. Logged per store.
    """
    driver()
    from podstore.fleet import admin

    renamed = admin.rename_node(url, old, new)
    click.echo(f"renamed node {old} to {new}: {renamed} store(s)")


@fleet.command()
@click.option("--node", default=None, metavar="NAME", help="Retire every store of this node.")
@click.option("--store", "store_id", default=None, metavar="STORE_ID", help="Retire one store.")
@url_option("--url")
def retire(node: str | None, store_id: str | None, url: str) -> None:
    """Retire the stores of a node, or one store (a wiped or reimaged node's old store).

    Kept as history; gone from the current-state views (v_fleet_*) and from `fleet owners`
    now. `fleet owners --at` an instant before the retirement still sees it. A retired
    store's ships are refused.
    """
    if (node is None) == (store_id is None):
        raise click.UsageError("give --node NAME or --store STORE_ID")
    driver()
    from podstore.fleet import admin

    for sid, owner in admin.retire(url, node=node, store_id=store_id):
        click.echo(f"retired store {sid} (node {owner})")
