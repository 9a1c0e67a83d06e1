"""``podstore metrics``: the store's Prometheus metrics, printed or written as a textfile."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from podstore.cli.context import Context
from podstore.cli.extras import require


@click.command("metrics")
@click.option(
    "--textfile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write them atomically to FILE (node_exporter's textfile collector, *.prom) "
    "instead of printing them.",
)
@click.pass_obj
def metrics(ctx: Context, textfile: Path | None) -> None:
    """Print the store's metrics in the Prometheus text format, read now (read-only)."""
    require("prometheus_client", "podstore metrics")
    from podstore.metrics.collector import registry_for
    from podstore.metrics.exposition import render, write_textfile

    registry = registry_for(ctx.store(readonly=True))
    if textfile is None:
        sys.stdout.buffer.write(render(registry))
        sys.stdout.flush()
    else:
        write_textfile(textfile, registry)
