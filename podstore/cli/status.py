"""``podstore status``: open (creating if needed) the store and print its counts."""

from __future__ import annotations

import json

import click

from podstore.cli.context import Context
from podstore.sqlite.files import wal_size
from podstore.sqlite.migrate import head_revision


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def status(ctx: Context, as_json: bool) -> None:
    """Open or create the store and print pod, container, allocation and device counts, and
    the size of its write-ahead log."""
    store = ctx.store()
    stats = store.stats()
    info = {
        "database": store.path,
        "store_id": store.store_id,
        "schema_revision": head_revision(),
        "pods": stats.pods,
        "containers": stats.containers,
        "allocations": stats.allocations,
        "device_rows": stats.device_rows,
        "distinct_devices": stats.distinct_devices,
        "registered_resources": stats.registered_resources,
        "wal_bytes": wal_size(store.path),
    }
    if as_json:
        click.echo(json.dumps(info, sort_keys=True))
        return
    width = max(len(k) for k in info)
    for key, value in info.items():
        click.echo(f"{key.replace('_', ' '):<{width}}  {value}")
