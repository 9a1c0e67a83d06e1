"""``podstore status``: the store's identity, schema revision and counts (read-only)."""

from __future__ import annotations

import click

from podstore.cli.context import Context
from podstore.cli.output import emit_object, output_option
from podstore.sqlite.files import wal_size
from podstore.sqlite.migrate import HEAD_REVISION


@click.command()
@output_option
@click.option("--json", "as_json", is_flag=True, help="Same as -o json.")
@click.pass_obj
def status(ctx: Context, output: str, as_json: bool) -> None:
    """Print the store's id, schema revision, pod, container, allocation and device counts,
    and the size of its write-ahead log.

    Read-only: the store must exist (exit 1 if not) and is never created or changed.
    """
    store = ctx.store(readonly=True)
    stats = store.stats()
    info = {
        "database": store.path,
        "store_id": store.store_id,
        # A read-only open succeeds only at the current revision.
        "schema_revision": HEAD_REVISION,
        "pods": stats.pods,
        "containers": stats.containers,
        "allocations": stats.allocations,
        "device_rows": stats.device_rows,
        "distinct_devices": stats.distinct_devices,
        "registered_resources": stats.registered_resources,
        "wal_bytes": wal_size(store.path),
    }
    emit_object(info, "json" if as_json else output)
