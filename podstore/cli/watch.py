"""``podstore watch``: follow a live kubelet checkpoint file (docs/watch.md, exit statuses
included). The options become a :class:`~podstore.watch.run.WatchConfig`, which
podstore/watch/run.py builds and runs.
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
from podstore.cli.durations import duration
from podstore.cli.extras import require
from podstore.cli.node import node_dirs
from podstore.cli.release_options import release_options
from podstore.errors import InvalidInputError
from podstore.watch.follower import DEFAULT_CHECKPOINT
from podstore.watch.run import WatchConfig, run

#: The environment variable ``--ship-to-env`` takes the fleet URL from.
FLEET_URL_ENV = "PODSTORE_FLEET_URL"


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
    # No check here: a checkpoint that is missing, unreadable or a directory is a sync
    # result (missing, invalid) the follower counts and waits out, not a usage error.
    type=click.Path(readable=False, path_type=Path),
)
@click.option(
    "--once",
    is_flag=True,
    help="Sync once and exit: 0 when applied or unchanged (and shipped, when shipping); 1 "
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
    help="Serve GET /metrics there, and the health checks GET /healthz and /readyz "
    "(':PORT' binds loopback only).",
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
    "while it is unreachable; with --once, shipped once after the sync). A password here "
    "shows in the process list: prefer --ship-to-file or --ship-to-env.",
)
@click.option(
    "--ship-to-file",
    metavar="FILE",
    default=None,
    help="Ship as --ship-to, to the URL in FILE (one line; mode 0600 or 0400 when it holds a "
    "password), read again before every ship; missing or empty: not shipping.",
)
@click.option(
    "--ship-to-env",
    is_flag=True,
    help=f"Ship as --ship-to, to the URL in ${FLEET_URL_ENV}.",
)
@click.option(
    "--keep-history",
    metavar="DURATION",
    callback=duration(),
    help="Prune history older than this (30d, 12h, …) after syncs, at most every 10 "
    "minutes; when shipping, never an event the fleet database has not received.",
)
@click.option(
    "--stuck-after",
    metavar="DURATION",
    callback=duration(minimum=1),
    default="5m",
    show_default=True,
    help="GET /healthz answers 503 when the follower has been stuck (a sync running, its "
    "loop not coming round, store errors) this long.",
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
@click.option(
    "--cri-socket",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read containers' exit times from the container runtime's CRI socket (e.g. "
    "/run/containerd/containerd.sock) as the earliest end of their allocations. Optional; "
    "a socket that does not answer is logged and counted, and the watch goes on.",
)
@release_options(
    required=False,
    help="Export podstore_kubelet_release_refused and _drops: what this kubelet release "
    "would do with each followed file, judged again after every sync.",
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
    ship_to_file: str | None,
    ship_to_env: bool,
    keep_history: float | None,
    stuck_after: float,
    node: str,
    kubelet_dir: Path | None,
    cri_socket: Path | None,
    sysfs: Path,
    pod_logs: Path,
    cdi_dirs: tuple[Path, ...],
    kubelet_version: Any,
    feature_gates: dict[str, bool],
) -> None:
    """Keep the store equal to kubelet's CHECKPOINT file, writing only what changed.

    Syncs at start, then within a second of every rewrite; a missing or bad file leaves the
    store as it was. CHECKPOINT is only ever read; it defaults to

    \b
    /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint

    With --kubelet-dir DIR every checkpoint there is followed the same way, each by its own
    rename: the device manager's, and the CPU, memory and DRA managers' state; a file absent
    since the start is no error (it is followed until it appears). The topology and pod names
    are read again after every sync and at every polling tick, and so are the CDI specs
    (--cdi-dir; a directory that is not there keeps what it gave).
    """
    given = [n for n, v in (("--ship-to", ship_to), ("--ship-to-file", ship_to_file),
                            ("--ship-to-env", ship_to_env)) if v]  # fmt: skip
    if len(given) > 1:
        raise click.UsageError(f"give one of {', '.join(given)}")
    if ship_to_env:
        ship_to = os.environ.get(FLEET_URL_ENV) or None
        if ship_to is None:
            raise click.BadParameter(f"${FLEET_URL_ENV} is not set", param_hint="'--ship-to-env'")
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
    if given:
        require("psycopg", given[0], extra="fleet")
    if cri_socket is not None:
        require("grpc", "--cri-socket", extra="cri")
    config = WatchConfig(
        checkpoint=str(checkpoint),
        once=once,
        interval=interval,
        metrics_addr=metrics_addr,
        textfile=str(textfile) if textfile is not None else None,
        ship_to=ship_to,
        node=node,
        ship_to_file=ship_to_file,
        keep_history=keep_history,
        stuck_after=stuck_after,
        kubelet_dir=None if kubelet_dir is None else os.path.abspath(kubelet_dir),
        sysfs=str(sysfs),
        pod_logs=str(pod_logs),
        cri_socket=None if cri_socket is None else os.path.abspath(cri_socket),
        cdi_dirs=tuple(os.path.abspath(d) for d in cdi_dirs),
        kubelet_version=kubelet_version,
        feature_gates=feature_gates,
    )
    sys.exit(run(ctx.store(), config))
