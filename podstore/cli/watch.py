"""``podstore watch``: follow a live kubelet checkpoint file (docs/watch.md).

Exit status: 0 after SIGTERM/SIGINT (the sync in progress is finished first) or, with
``--once``, when the file was applied or unchanged (and, with ``--ship-to``, shipped); 1 when
``--once`` found the file missing or bad (the store untouched), on a store error, or when
``--once --ship-to`` could not ship (the sync stays applied); 2 on bad usage, also when an
optional part (``podstore[watch]``, ``podstore[fleet]`` for ``--ship-to``) is not installed.

The options become a :class:`~podstore.watch.run.WatchConfig`; podstore/watch/run.py builds
and runs what it asks for.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import click

from podstore.checkpoint import FILE_NAMES
from podstore.cli.context import Context
from podstore.cli.extras import require
from podstore.cli.node import node_dirs
from podstore.errors import InvalidInputError
from podstore.watch.follower import DEFAULT_CHECKPOINT
from podstore.watch.run import WatchConfig, run


def _metrics_addr(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    require("prometheus_client", "--metrics-addr")
    from podstore.metrics.exposition import parse_addr

    try:
        return parse_addr(value)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("watch")
@click.argument(
    "checkpoint",
    required=False,
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
)
@click.option(
    "--once",
    is_flag=True,
    help="Sync once and exit: 0 when applied or unchanged (and shipped, with --ship-to); 1 "
    "when the file is missing or bad, or the ship failed (the sync stays applied).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1, max=86400),
    default=10.0,
    show_default=True,
    help="Seconds between checks of the file when no file event came (the polling fallback).",
)
@click.option(
    "--metrics-addr",
    metavar="HOST:PORT",
    callback=_metrics_addr,
    help="Serve GET /metrics there (':PORT' binds loopback only).",
)
@click.option(
    "--textfile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Rewrite this node_exporter textfile (*.prom) after every sync and check.",
)
@click.option(
    "--ship-to",
    metavar="URL",
    default=None,
    help="Ship the history to this fleet DB after every applied sync (retried with backoff "
    "while it is unreachable; with --once, shipped once after the sync).",
)
@click.option(
    "--node",
    default=socket.gethostname,
    show_default="the host name",
    help="The node name the fleet database records.",
)
@click.option(
    "--kubelet-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Follow every checkpoint kubelet keeps in this directory (device, CPU, memory, DRA "
    "managers; those absent now, once they appear) instead of CHECKPOINT, with the NUMA "
    "topology (--sysfs) and pod names (--pod-logs).",
)
@node_dirs
@click.pass_obj
def watch(
    ctx: Context,
    checkpoint: Path | None,
    once: bool,
    interval: float,
    metrics_addr: tuple[str, int] | None,
    textfile: Path | None,
    ship_to: str | None,
    node: str,
    kubelet_dir: Path | None,
    sysfs: Path,
    pod_logs: Path,
) -> None:
    """Keep the store equal to kubelet's CHECKPOINT file, writing only what changed.

    Syncs at start, then within a second of every rewrite; a missing or bad file leaves the
    store as it was. CHECKPOINT is only ever read; it defaults to

    \b
    /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint

    With --kubelet-dir DIR every checkpoint there is followed the same way, each by its own
    rename: the device manager's, and the CPU, memory and DRA managers' state; a file absent
    since the start is no error (it is followed until it appears). The topology and pod names
    are read again after every sync and at every polling tick.
    """
    if kubelet_dir is not None and checkpoint is not None:
        raise click.UsageError("give CHECKPOINT or --kubelet-dir, not both")
    if kubelet_dir is not None:
        checkpoint = kubelet_dir / FILE_NAMES["devices"]
    elif checkpoint is None:
        checkpoint = Path(DEFAULT_CHECKPOINT)
    if not once:
        require("watchdog", "podstore watch")
    if textfile is not None:
        require("prometheus_client", "--textfile")
    if ship_to is not None:
        require("psycopg", "--ship-to", extra="fleet")
    config = WatchConfig(
        checkpoint=str(checkpoint),
        once=once,
        interval=interval,
        metrics_addr=metrics_addr,
        textfile=str(textfile) if textfile is not None else None,
        ship_to=ship_to,
        node=node,
        kubelet_dir=None if kubelet_dir is None else os.path.abspath(kubelet_dir),
        sysfs=str(sysfs),
        pod_logs=str(pod_logs),
    )
    sys.exit(run(ctx.store(), config))
