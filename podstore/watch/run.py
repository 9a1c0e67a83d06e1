"""``podstore watch`` put together: from a :class:`WatchConfig` to a running follower with the
parts the options ask for — the metrics endpoint, the textfile, the shipper after syncs, the
signal handling — and the exit status.

The command line only parses its options into a WatchConfig (cli/watch.py); everything it
starts is built here, each part in one function, so a new option is a field and a part.
"""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

from podstore.metrics.stats import SyncStats
from podstore.rules.secrets import mask_url, scrub, url_password
from podstore.store import PodStore
from podstore.watch.follower import DEFAULT_CHECKPOINT, Follower, SyncOutcome
from podstore.watch.node import (
    FollowerGroup,
    NodeDirs,
    NodeFacts,
    NodeFollower,
    node_followers,
)
from podstore.watch.shipping import RetryingHook
from podstore.watch.textfile import TextfileWriter

log = logging.getLogger("podstore")

#: Exit statuses (README): done / a sync or ship that failed.
EXIT_OK = 0
EXIT_FAILED = 1


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What ``podstore watch`` was asked to do (docs/watch.md)."""

    checkpoint: str = DEFAULT_CHECKPOINT
    #: One sync (and one ship with ``ship_to``), then exit.
    once: bool = False
    #: Seconds between polls of the file when no file event came.
    interval: float = 10.0
    #: (host, port) to serve ``GET /metrics`` on.
    metrics_addr: tuple[str, int] | None = None
    #: node_exporter textfile to rewrite after every sync.
    textfile: str | None = None
    #: Fleet database URL to ship the history to after applied syncs.
    ship_to: str | None = None
    #: The node name the fleet database records.
    node: str = ""
    #: ``--kubelet-dir``: follow every checkpoint kubelet keeps there (``checkpoint`` is then
    #: its device manager file), with the topology under ``sysfs`` and names under
    #: ``pod_logs`` (watch/node.py).
    kubelet_dir: str | None = None
    sysfs: str = "/sys"
    pod_logs: str = "/var/log/pods"


def setup_logging() -> None:
    """One line per record on stderr, with time and level (the follower's log)."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def one_line(text: str) -> str:
    """``text`` on one log line (drivers' messages span several)."""
    return " ".join(text.split())


class Watch:
    """The parts of one ``podstore watch`` run over ``store``, built from ``config``."""

    def __init__(self, store: PodStore, config: WatchConfig) -> None:
        self.store = store
        self.config = config
        self.stats = SyncStats()
        #: Per checkpoint kind, its follower's counters (the ``checkpoint`` label).
        self.stats_by_kind: dict[str, SyncStats] = {"devices": self.stats}
        self.follower: Follower
        self.node_followers: list[NodeFollower] = []
        self.facts: NodeFacts | None = None
        if config.kubelet_dir is not None:
            self._follow_node(config.kubelet_dir)
        else:
            self.follower = Follower(
                store, config.checkpoint, interval=config.interval, stats=self.stats
            )
        self.shipper = self._shipper() if config.ship_to else None
        registry = self._registry()
        if registry is not None and config.metrics_addr is not None:
            self._serve_metrics(registry, *config.metrics_addr)
        if registry is not None and config.textfile is not None:
            textfile = TextfileWriter(config.textfile, registry, store.path)
            self.follower.on_sync.append(lambda _outcome: textfile.after_sync())
            self.follower.on_tick.append(textfile.at_tick)

    # ---- the parts ---------------------------------------------------------------------

    def _follow_node(self, kubelet_dir: str) -> None:
        """A follower per checkpoint of the kubelet directory (the device manager's is
        ``self.follower``); the others share its sync hooks, so every part that hooks it
        hears of theirs too. The topology and names are read again after each sync and at
        the device follower's ticks."""
        dirs = NodeDirs(kubelet_dir, self.config.sysfs, self.config.pod_logs)
        followers = node_followers(self.store, dirs, self.config.interval, self.stats_by_kind)
        self.follower, *self.node_followers = followers
        self.stats = self.stats_by_kind["devices"]
        for f in self.node_followers:
            f.on_sync = self.follower.on_sync
        facts = self.facts = NodeFacts(self.store, dirs)
        self.follower.on_sync.append(lambda _outcome: facts.refresh())
        self.follower.on_tick.append(facts.refresh)

    def _registry(self) -> Any:
        """The metrics registry (read at scrape time), when anything exposes it."""
        if self.config.metrics_addr is None and self.config.textfile is None:
            return None
        from podstore.metrics.collector import registry_for

        return registry_for(self.store, self.stats_by_kind)

    def _serve_metrics(self, registry: Any, host: str, port: int) -> None:
        from podstore.metrics.exposition import serve

        bound_host, bound_port = serve(host, port, registry)
        log.info("serving metrics on http://%s:%d/metrics", bound_host, bound_port)

    def _shipper(self) -> RetryingHook:
        """The runner of the hook that ships the history (its ``call`` ships once, in the
        caller's thread); errors are described on one line, the URL's password masked."""
        from podstore.fleet.ship import ship

        url = self.config.ship_to
        assert url is not None
        store, node = self.store, self.config.node

        def call() -> object:
            return ship(store, url, node=node)

        return RetryingHook(
            call,
            name=f"ship to {mask_url(url)}",
            describe=lambda exc: one_line(scrub(str(exc) or type(exc).__name__, url_password(url))),
        )

    # ---- running -----------------------------------------------------------------------

    def run(self) -> int:
        """Run as configured; returns the exit status."""
        return self.once() if self.config.once else self.follow()

    def once(self) -> int:
        """One sync, then (with ``ship_to``) one ship in this thread. 0 only when the sync was
        applied or unchanged and the ship, if asked for, succeeded; a failed ship leaves the
        sync applied and is logged on one line."""
        outcome = self.follower.sync()
        failed = not outcome.ok and not _absent(self.follower)
        for f in self.node_followers:
            if not f.sync().ok and not f.absent:
                failed = True
        if self.facts is not None:
            self.facts.refresh()
        if failed:
            return EXIT_FAILED
        if self.shipper is not None:
            try:
                self.shipper.call()
            except Exception as exc:
                log.error("%s failed: %s", self.shipper.name, self.shipper.describe(exc))
                return EXIT_FAILED
        return EXIT_OK

    def follow(self) -> int:
        """Sync now and on every change until SIGTERM or SIGINT; the sync in progress is
        finished first. Returns 0."""
        shipper = self.shipper
        if shipper is not None:
            shipper.start()
            self.follower.on_sync.append(lambda outcome: _ship_after(shipper, outcome))
        group = FollowerGroup([self.follower, *self.node_followers])
        _stop_on_signals(group)
        ship_to = self.config.ship_to
        log.info(
            "following %s into %s (node %s%s)",
            self.config.checkpoint,
            self.store.path,
            self.config.node,
            f", shipping to {mask_url(ship_to)}" if ship_to else "",
        )
        try:
            group.run(on_start=shipper.notify if shipper is not None else None)
        finally:
            if shipper is not None:
                shipper.stop()
        log.info("stopped")
        return EXIT_OK


def _ship_after(shipper: RetryingHook, outcome: SyncOutcome) -> None:
    if outcome.result == "applied":
        shipper.notify()


def _absent(follower: Follower) -> bool:
    """A ``--kubelet-dir`` follower whose file has not been there since the start."""
    return isinstance(follower, NodeFollower) and follower.absent


def _stop_on_signals(follower: Follower | FollowerGroup) -> None:
    """SIGTERM and SIGINT end the loop after the sync in progress (the handler only rings the
    follower's signal-safe wake-up)."""

    def stop(_signum: int, _frame: FrameType | None) -> None:
        follower.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def run(store: PodStore, config: WatchConfig) -> int:
    """``podstore watch`` over ``store``: logging set up, the parts built, run; the exit
    status."""
    setup_logging()
    return Watch(store, config).run()
