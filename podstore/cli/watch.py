"""``podstore watch``: follow a live kubelet checkpoint file (docs/watch.md).

Exit status: 0 after SIGTERM/SIGINT (the sync in progress is finished first) or, with
``--once``, when the file was applied or unchanged; 1 when ``--once`` found the file missing
or bad (the store untouched) or on a store error; 2 on bad usage, also when an optional part
(``podstore[watch]``, ``podstore[fleet]`` for ``--ship-to``) is not installed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.extras import require
from podstore.errors import InvalidInputError, PodStoreError
from podstore.rules.secrets import mask_url, scrub, url_password
from podstore.store import PodStore
from podstore.watch.follower import DEFAULT_CHECKPOINT, Follower, SyncOutcome
from podstore.watch.shipping import RetryingHook
from podstore.watch.stats import SyncStats

log = logging.getLogger("podstore")


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _metrics_addr(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    require("prometheus_client", "--metrics-addr")
    from podstore.metrics.exposition import parse_addr

    try:
        return parse_addr(value)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from None


def _shipper(store: PodStore, url: str, node: str) -> RetryingHook:
    """The runner of the hook that ships the history after syncs (its ``call`` ships once,
    in the caller's thread), or exit 2 when the fleet extra (its driver) is not installed."""
    require("psycopg", "--ship-to", extra="fleet")
    from podstore.fleet.ship import ship

    def call() -> object:
        return ship(store, url, node=node)

    return RetryingHook(
        call,
        name=f"ship to {mask_url(url)}",
        describe=lambda exc: scrub(str(exc) or type(exc).__name__, url_password(url)),
    )


@click.command("watch")
@click.argument(
    "checkpoint",
    required=False,
    default=DEFAULT_CHECKPOINT,
    type=click.Path(dir_okay=False, path_type=Path),
)
@click.option("--once", is_flag=True, help="Sync once and exit (0 applied/unchanged, 1 not).")
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
@click.option("--ship-to", metavar="URL", default=None, help="Ship the history to this fleet DB.")
@click.option(
    "--node",
    default=socket.gethostname,
    show_default="the host name",
    help="The node name the fleet database records.",
)
@click.pass_obj
def watch(
    ctx: Context,
    checkpoint: Path,
    once: bool,
    interval: float,
    metrics_addr: tuple[str, int] | None,
    textfile: Path | None,
    ship_to: str | None,
    node: str,
) -> None:
    """Keep the store equal to kubelet's CHECKPOINT file, writing only what changed.

    Syncs at start, then within a second of every rewrite; a missing or bad file leaves the
    store as it was. CHECKPOINT is only ever read; it defaults to

    \b
    /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
    """
    _setup_logging()
    if not once:
        require("watchdog", "podstore watch")
    if textfile is not None:
        require("prometheus_client", "--textfile")
    store = ctx.store()
    shipper = _shipper(store, ship_to, node) if ship_to else None
    stats = SyncStats()
    follower = Follower(store, str(checkpoint), interval=interval, stats=stats)

    registry = None
    if metrics_addr is not None or textfile is not None:
        from podstore.metrics.collector import registry_for

        registry = registry_for(store, stats)
    if metrics_addr is not None:
        from podstore.metrics.exposition import serve

        assert registry is not None
        host, port = serve(*metrics_addr, registry)
        log.info("serving metrics on http://%s:%d/metrics", host, port)
    if textfile is not None:
        write_textfile = _textfile_writer(textfile, registry, store.path)
        follower.on_sync.append(lambda _outcome: write_textfile(True))
        follower.on_tick.append(lambda: write_textfile(False))
    if shipper is not None and not once:
        shipper.start()
        follower.on_sync.append(lambda outcome: _ship_after(shipper, outcome))

    if once:
        outcome = follower.sync()
        if shipper is not None and outcome.ok:
            # One sync, one ship, in this thread: a failure is this run's failure.
            try:
                shipper.call()
            except Exception as exc:
                log.error("%s failed: %s", shipper.name, shipper.describe(exc))
                sys.exit(1)
        sys.exit(0 if outcome.ok else 1)

    def stop(signum: int, _frame: FrameType | None) -> None:
        follower.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "following %s into %s (node %s%s)",
        checkpoint,
        store.path,
        node,
        f", shipping to {mask_url(ship_to)}" if ship_to else "",
    )
    try:
        follower.run(on_start=shipper.notify if shipper is not None else None)
    finally:
        if shipper is not None:
            shipper.stop()
    log.info("stopped")


def _ship_after(shipper: RetryingHook, outcome: SyncOutcome) -> None:
    if outcome.result == "applied":
        shipper.notify()


def _textfile_writer(path: Path, registry: Any, db: str) -> Callable[[bool], None]:
    """Writes the textfile: after every sync, and at a polling tick when another writer
    changed the store (its files' sizes or times moved), so an idle node reads nothing."""
    from podstore.metrics.exposition import write_textfile

    last_problem: list[str] = []
    seen: list[object] = []

    def store_files() -> object:
        out: list[tuple[int, int, int] | None] = []
        for name in (db, db + "-wal"):
            try:
                st = os.stat(name)
            except OSError:
                out.append(None)
            else:
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def write(always: bool) -> None:
        now = store_files()
        if not always and seen == [now]:
            return
        try:
            write_textfile(path, registry)
        except PodStoreError as exc:
            if [str(exc)] != last_problem:
                log.error("%s", exc)
                last_problem[:] = [str(exc)]
        else:
            last_problem.clear()
            seen[:] = [now]

    return write
