"""``podstore ship --to URL``: send the store's history to the fleet database, exactly once."""

from __future__ import annotations

import socket

import click

from podstore.cli.context import Context
from podstore.cli.extras import require
from podstore.cli.fleet import URL_ENV, fleet_url


def _to(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # --to-file stands in for --to (and $PODSTORE_FLEET_URL): checked in the command.
    return fleet_url(ctx, param, value) if value or not ctx.params.get("to_file") else None


@click.command()
@click.option(
    "--to-file",
    "to_file",
    metavar="FILE",
    default=None,
    is_eager=True,
    help="Read the fleet URL from FILE (one line; not readable by others when it holds a "
    "password), so that no password stands in the command line.",
)
@click.option(
    "--to",
    "url",
    metavar="URL",
    default=None,
    callback=_to,
    help="The fleet database: postgresql://user@host:port/db (or a unix-socket form); "
    f"default ${URL_ENV}. A password in it is never printed; prefer --to-file.",
)
@click.option(
    "--node",
    default=None,
    metavar="NAME",
    help="The node name the fleet shows for this store (default: the host name).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Events per PostgreSQL transaction (default 5000).",
)
@click.pass_obj
def ship(
    ctx: Context, to_file: str | None, url: str | None, node: str | None, batch_size: int | None
) -> None:
    """Ship every event the fleet database lacks, with the state it produces; exit 0 when done.

    Exactly once: a repeated, interrupted or concurrent ship never sends an event twice or
    skips one. History the store pruned before it was shipped is replaced by a snapshot of
    the store's current state (and reported). The store is only read. A store belongs to the
    node that first shipped it: a ship that names another node, or whose hash chain does not
    continue the fleet's copy (a cloned or edited store), is refused with exit status 1 and
    writes nothing. PostgreSQL down or unreachable: exit status 1, nothing changed.
    """
    require("psycopg", "podstore ship", extra="fleet")
    from podstore.fleet.ship import DEFAULT_BATCH
    from podstore.fleet.ship import ship as ship_store

    if url is None and to_file is not None:
        from podstore.fleet.urls import read_url_file

        url = read_url_file(to_file)
    store = ctx.store(readonly=True)
    report = ship_store(
        store, url, node=node or socket.gethostname(), batch_size=batch_size or DEFAULT_BATCH
    )
    batches = "batch" if report.batches == 1 else "batches"
    click.echo(
        f"shipped {report.shipped} events of store {report.store_id} (node {report.node}) in "
        f"{report.batches} {batches} to {report.url}; it holds seq {report.last_seq}"
    )
    if report.snapshots:
        click.echo(
            f"gap: {report.missing} events were pruned here before they were shipped; sent "
            f"{report.snapshots} snapshot(s) of the current state in their place"
        )
