"""``podstore ship --to URL``: send the store's history to the fleet database, exactly once."""

from __future__ import annotations

import socket

import click

from podstore.cli.context import Context
from podstore.cli.extras import require
from podstore.cli.fleet import url_option


@click.command()
@url_option("--to")
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
def ship(ctx: Context, url: str, node: str | None, batch_size: int | None) -> None:
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
