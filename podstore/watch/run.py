"""``podstore watch`` put together: a :class:`WatchConfig` (parsed by cli/watch.py) to a
running follower with the parts the options ask for (metrics and health, textfile, shipper,
pruner, signals) and the exit status; a new option is a field and a part.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from podstore import logs
from podstore.checkpoint.cdi_specs import DEFAULT_CDI_DIRS
from podstore.errors import InvalidInputError, PodStoreError
from podstore.metrics.stats import SyncStats
from podstore.pure.secrets import mask_url, scrub, url_password
from podstore.store import PodStore
from podstore.watch.follower import DEFAULT_CHECKPOINT, Follower, SyncOutcome
from podstore.watch.health import STUCK_AFTER, Health
from podstore.watch.node import (
    FollowerGroup,
    NodeDirs,
    NodeFollower,
    TopologyAndNames,
    node_followers,
)
from podstore.watch.release_verdicts import ReleaseVerdicts
from podstore.watch.retention import PRUNE_EVERY, Pruner
from podstore.watch.shipping import RetryingHook, url_file_holds_url
from podstore.watch.textfile import TextfileWriter

if TYPE_CHECKING:
    from podstore.checkpoint.releases import Release

log = logging.getLogger("podstore")

#: Exit statuses (README "Exit codes"): done / a sync, ship or prune that failed.
EXIT_OK = 0
EXIT_FAILED = 1


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What ``podstore watch`` was asked to do (docs/watch.md)."""

    checkpoint: str = DEFAULT_CHECKPOINT
    once: bool = False
    #: Seconds between polls of the file when no file event came.
    interval: float = 10.0
    #: (host, port) to serve ``GET /metrics``, ``/healthz`` and ``/readyz`` on.
    metrics_addr: tuple[str, int] | None = None
    textfile: str | None = None
    ship_to: str | None = None
    node: str = ""
    #: Read at start and before every ship; missing or empty: not shipping (until a URL is).
    ship_to_file: str | None = None
    #: Seconds of history to keep; None: all.
    keep_history: float | None = None
    prune_every: float = PRUNE_EVERY
    stuck_after: float = STUCK_AFTER
    #: ``--kubelet-dir``: follow every checkpoint kubelet keeps there (``checkpoint`` is then
    #: its device manager's), with the topology under ``sysfs`` and names under ``pod_logs``.
    kubelet_dir: str | None = None
    sysfs: str = "/sys"
    pod_logs: str = "/var/log/pods"
    #: ``--cdi-dir``: the CDI spec directories, read with the topology and names.
    cdi_dirs: tuple[str, ...] = DEFAULT_CDI_DIRS
    #: ``--kubelet-version``: the parsed release whose verdicts the gauges show (None: none).
    kubelet_version: Release | None = None
    feature_gates: dict[str, bool] = field(default_factory=dict)
    #: ``--cri-socket``: the container runtime's socket, read for containers' exit times.
    cri_socket: str | None = None


class Watch:
    """The parts of one ``podstore watch`` run over ``store``, built from ``config``. Raises
    InvalidInputError (nothing started) for a ``--ship-to-file`` that is not acceptable,
    PodStoreError when the metrics address cannot be bound."""

    def __init__(self, store: PodStore, config: WatchConfig) -> None:
        self.store = store
        self.config = config
        self.stats = SyncStats()
        #: Per checkpoint kind, its follower's counters (the ``checkpoint`` label).
        self.stats_by_kind: dict[str, SyncStats] = {"devices": self.stats}
        self.follower: Follower
        self.node_followers: list[NodeFollower] = []
        self.topology_and_names: TopologyAndNames | None = None
        if config.kubelet_dir is not None:
            self._follow_node(config.kubelet_dir)
        else:
            self.follower = Follower(
                store, config.checkpoint, interval=config.interval, stats=self.stats
            )
        self.verdicts = self._verdicts()
        self.health = Health(stuck_after=config.stuck_after)
        for f in (self.follower, *self.node_followers):
            self.health.watch(str(f.path), f.pulse, config.interval)
        #: The fleet's ShippingStatus when shipping is configured (``ship`` fills it).
        self.shipping: Any = None
        self._url: str | None = None  # the fleet URL last read
        self.shipper = self._shipper() if self.ships else None
        self.pruner = self._pruner() if config.keep_history is not None else None
        self.cri = self._cri() if config.cri_socket is not None else None
        registry = self._registry()
        if registry is not None and config.metrics_addr is not None:
            self._serve_metrics(registry, *config.metrics_addr)
        if registry is not None and config.textfile is not None:
            textfile = TextfileWriter(config.textfile, registry, store.path)
            self.follower.on_sync.append(lambda _outcome: textfile.write(always=True))
            self.follower.on_tick.append(lambda: textfile.write(always=False))

    @property
    def ships(self) -> bool:
        return self.config.ship_to is not None or self.config.ship_to_file is not None

    # ---- the parts ---------------------------------------------------------------------

    def _follow_node(self, kubelet_dir: str) -> None:
        """A follower per checkpoint of the kubelet directory (the device manager's is
        ``self.follower``, whose sync hooks the others share, so every part hears of theirs)."""
        dirs = NodeDirs(kubelet_dir, self.config.sysfs, self.config.pod_logs, self.config.cdi_dirs)
        followers = node_followers(self.store, dirs, self.config.interval, self.stats_by_kind)
        self.follower, *self.node_followers = followers
        self.stats = self.stats_by_kind["devices"]
        for f in self.node_followers:
            f.on_sync = self.follower.on_sync
        node_info = self.topology_and_names = TopologyAndNames(self.store, dirs)
        self.follower.on_sync.append(lambda _outcome: node_info.refresh())
        self.follower.on_tick.append(node_info.refresh)

    def _cri(self) -> Any:
        """The runtime's exit times, read after every sync and at polling ticks."""
        from podstore.watch.cri import CriEvidence

        assert self.config.cri_socket is not None
        cri = CriEvidence(self.store, self.config.cri_socket)

        def poll(_outcome: object = None) -> None:
            cri.poll()

        self.follower.on_sync.append(poll)
        self.follower.on_tick.append(poll)
        return cri

    def _verdicts(self) -> ReleaseVerdicts | None:
        """The release's verdicts on every followed file, judged again after each sync."""
        if self.config.kubelet_version is None:
            return None
        followers = (self.follower, *self.node_followers)
        paths = {getattr(f, "kind", "devices"): str(f.path) for f in followers}
        verdicts = ReleaseVerdicts(paths, self.config.kubelet_version, self.config.feature_gates)
        verdicts.refresh()
        self.follower.on_sync.append(lambda _outcome: verdicts.refresh())
        return verdicts

    def _registry(self) -> Any:
        if self.config.metrics_addr is None and self.config.textfile is None:
            return None
        from podstore.metrics.collector import registry_for

        registry = registry_for(self.store, self.stats_by_kind)
        if self.verdicts is not None:
            from podstore.metrics.release import release_collector

            registry.register(release_collector(self.verdicts.current))
        if self.cri is not None:
            from podstore.metrics.cri import CriCollector

            registry.register(CriCollector(self.cri))
        if self.shipping is not None:
            from podstore.metrics.shipping import ShippingCollector

            registry.register(ShippingCollector(self.store, self.shipping))
        return registry

    def _serve_metrics(self, registry: Any, host: str, port: int) -> None:
        from podstore.metrics.exposition import serve

        health = self.health
        routes = {
            "/healthz": lambda: _answer(health.live()),
            "/readyz": lambda: _answer(health.ready()),
        }
        bound_host, bound_port = serve(host, port, registry, routes)
        log.info(
            "serving metrics on http://%s:%d/metrics (and /healthz, /readyz)",
            bound_host,
            bound_port,
        )

    def fleet_url(self) -> str | None:
        """The fleet URL to ship to now: ``--ship-to``'s, or ``--ship-to-file``'s read again (a
        rotated Secret is picked up), None when that file is missing or empty. Raises
        InvalidInputError for a file that is not acceptable."""
        if self.config.ship_to is not None:
            return self.config.ship_to
        path = self.config.ship_to_file
        assert path is not None
        if not url_file_holds_url(path):
            return None
        from podstore.fleet.urls import read_url_file

        self._url = read_url_file(path)
        return self._url

    def _describe(self, exc: BaseException) -> str:
        """A ship failure on one line (drivers' span several), without the URL's password."""
        url = self._url or self.config.ship_to or ""
        return " ".join(scrub(str(exc) or type(exc).__name__, url_password(url)).split())

    def _shipper(self) -> RetryingHook:
        """The hook that ships the history (its ``call`` ships once, in the caller's thread)."""
        from podstore.fleet.ship import ship
        from podstore.fleet.status import ShippingStatus

        status = self.shipping = ShippingStatus()
        store, node = self.store, self.config.node
        url = self.fleet_url()  # a bad file fails here, before anything starts
        self._url = url
        if url is not None:
            name = f"ship to {mask_url(url)}"
        else:
            name = f"ship to the URL in {self.config.ship_to_file}"
            log.warning(
                "%s holds no fleet URL: not shipping until it does",
                self.config.ship_to_file,
                extra={"event": "ship", "file": self.config.ship_to_file},
            )

        def call() -> object:
            try:
                target = self.fleet_url()
            except InvalidInputError as exc:
                status.failed(str(exc), None, None)
                raise
            if target is None:
                return None  # the file is gone or empty: not shipping now
            return ship(store, target, node=node, status=status)

        return RetryingHook(call, name=name, describe=self._describe)

    def fleet_holds(self) -> int | None:
        """The newest seq the fleet confirmed holding (None: not known yet); every seq when no
        fleet URL is configured now."""
        if self.shipping is None:
            return _EVERY_SEQ
        if self.config.ship_to is None and not url_file_holds_url(self.config.ship_to_file):
            return _EVERY_SEQ
        last: int | None = self.shipping.snapshot().last_seq
        return last

    def _pruner(self) -> Pruner:
        keep = self.config.keep_history
        assert keep is not None
        return Pruner(
            self.store,
            keep,
            every=self.config.prune_every,
            shipped=self.fleet_holds if self.ships else None,
        )

    # ---- running -----------------------------------------------------------------------

    def run(self) -> int:
        try:
            return self.once() if self.config.once else self.follow()
        finally:
            self.health.stopping = True

    def once(self) -> int:
        """One sync, then one ship and one prune if asked for; 0 only when all succeeded (a
        failed ship leaves the sync applied, and the prune keeps what the fleet lacks)."""
        outcome = self.follower.sync()
        failed = not outcome.ok and not _absent(self.follower)
        for f in self.node_followers:
            if not f.sync().ok and not f.absent:
                failed = True
        if self.node_followers and all(_absent(f) for f in (self.follower, *self.node_followers)):
            # No file of kubelet's at all: a mistyped --kubelet-dir, whose sysfs and pod logs
            # are not read into the store either.
            log.error(
                "%s: none of kubelet's checkpoint files is there (not kubelet's directory?)",
                self.config.kubelet_dir,
            )
            return EXIT_FAILED
        if self.topology_and_names is not None:
            self.topology_and_names.refresh()
        if self.cri is not None:
            self.cri.poll()
        if failed:
            return EXIT_FAILED
        code = EXIT_OK
        if self.shipper is not None:
            try:
                self.shipper.call()
            except Exception as exc:
                log.error(
                    "%s failed: %s",
                    self.shipper.name,
                    self.shipper.describe(exc),
                    extra={"event": "ship", "error": type(exc).__name__},
                )
                code = EXIT_FAILED
        if self.pruner is not None:
            try:
                self.pruner.prune()
            except PodStoreError as exc:
                log.error("pruning the history failed: %s", exc, extra={"event": "prune"})
                code = EXIT_FAILED
        return code

    def follow(self) -> int:
        """Sync now and on every change until SIGTERM or SIGINT (the sync in progress is
        finished first). Returns 0."""
        shipper = self.shipper
        if shipper is not None:
            shipper.start()
            self.follower.on_sync.append(lambda outcome: _ship_after(shipper, outcome))
        pruner = self.pruner
        if pruner is not None:
            # After syncs, and at polling ticks so that an idle node prunes too.
            self.follower.on_sync.append(lambda _outcome: pruner.maybe())
            self.follower.on_tick.append(pruner.maybe)
        group = FollowerGroup([self.follower, *self.node_followers])

        def stop(_signum: int, _frame: FrameType | None) -> None:
            group.stop()  # only rings the group's signal-safe wake-up

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        shipping = f"; {shipper.name}" if shipper is not None else ""
        log.info(
            "following %s into %s (node %s%s)",
            self.config.checkpoint,
            self.store.path,
            self.config.node,
            shipping,
            extra={"event": "start", "checkpoint": self.config.checkpoint},
        )
        try:
            group.run(on_start=shipper.notify if shipper is not None else None)
        finally:
            self.health.stopping = True
            if shipper is not None:
                shipper.stop()
        log.info("stopped", extra={"event": "stop"})
        return EXIT_OK


#: What the fleet holds when none is configured: the pruner's cut is then time alone.
_EVERY_SEQ = 2**62


def _answer(answer: Any) -> tuple[int, bytes]:
    return int(answer.status), bytes(answer.encoded())


def _ship_after(shipper: RetryingHook, outcome: SyncOutcome) -> None:
    if outcome.result == "applied":
        shipper.notify()


def _absent(follower: Follower) -> bool:
    return isinstance(follower, NodeFollower) and follower.absent


def run(store: PodStore, config: WatchConfig) -> int:
    """``podstore watch`` over ``store``; returns the exit status."""
    if not logs.foreign_handlers():  # an application's own handler is left alone
        logs.configure(level=logging.INFO)
    return Watch(store, config).run()
