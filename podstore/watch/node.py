"""``podstore watch --kubelet-dir``: every checkpoint of the node followed, each by its own
:class:`NodeFollower`, with the NUMA topology and pod names (docs/watch.md, "The whole node").
A file absent since the start is no problem (a node without the memory manager never writes
its file); one that was there and went is ``missing``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from podstore.checkpoint import FILE_NAMES, KINDS, read_numa_topology, read_pod_names
from podstore.checkpoint.cdi_specs import DEFAULT_CDI_DIRS, read_cdi_specs
from podstore.checkpoint.topology import is_sysfs
from podstore.errors import PodStoreError
from podstore.metrics.stats import SyncStats
from podstore.storage.node import sync as node_sync
from podstore.store import PodStore
from podstore.types import NodeSyncReport, SyncReport
from podstore.watch.follower import Follower, SyncOutcome
from podstore.watch.trigger import signature

log = logging.getLogger("podstore")


@dataclass(frozen=True, slots=True)
class NodeDirs:
    kubelet_dir: str
    sysfs: str
    pod_logs: str
    cdi_dirs: tuple[str, ...] = DEFAULT_CDI_DIRS

    def path(self, kind: str) -> str:
        return os.path.join(self.kubelet_dir, FILE_NAMES[kind])


class NodeFollower(Follower):
    """Keeps the store's ``kind`` equal to its checkpoint file in the kubelet directory."""

    def __init__(
        self,
        store: PodStore,
        path: str,
        kind: str,
        *,
        interval: float = 10.0,
        stats: SyncStats | None = None,
    ) -> None:
        super().__init__(store, path, interval=interval, stats=stats)
        self.kind = kind
        self._file_sync = node_sync.FileSync(kind, path)
        self._been_there = False
        self._said_absent = False

    @property
    def absent(self) -> bool:
        """The file has not been there since the follower started."""
        return not self._been_there

    def sync(self) -> SyncOutcome:
        if not self._been_there and not os.path.exists(self.path):
            if not self._said_absent:
                log.info("%s: absent; following its directory until it appears", self.path)
                self._said_absent = True
            self._seen = signature(self.path)
            self.pulse.nothing_to_sync()
            return SyncOutcome("missing", 0.0, problem="absent since the start")
        self._been_there = True
        return super().sync()

    def _apply(self) -> SyncReport | NodeSyncReport:
        if self.kind == "devices":
            return super()._apply()
        return node_sync.sync_file(self._sessions, self._file_sync)

    def _log(self, outcome: SyncOutcome) -> None:
        report = outcome.report
        if isinstance(report, NodeSyncReport) and report.changed:
            self._problems.clear(self.path)
            log.info(
                "applied %s in %.3f s: %d written, %d deleted",
                self.path,
                outcome.seconds,
                report.written,
                report.deleted,
            )
            return
        super()._log(outcome)


class TopologyAndNames:
    """The topology, pod names and CDI specs, written when they differ; a source that is not
    there (a mistyped path) leaves the store's as they were, and says so once."""

    def __init__(self, store: PodStore, dirs: NodeDirs) -> None:
        self.store = store
        self.dirs = dirs
        self._lock = threading.Lock()
        self._seen: tuple[object, ...] | None = None
        self._said: set[str] = set()
        self._cdi_said: frozenset[str] = frozenset()

    def _there(self, ok: bool, path: str, what: str) -> bool:
        if ok:
            self._said.discard(path)
        elif path not in self._said:
            self._said.add(path)
            log.warning("%s: not there; the stored %s are left as they were", path, what)
        return ok

    def refresh(self) -> None:
        """Read both and write what differs (never raises: a store error is logged)."""
        with self._lock:
            has_sysfs = self._there(is_sysfs(self.dirs.sysfs), self.dirs.sysfs, "NUMA nodes")
            has_logs = self._there(os.path.isdir(self.dirs.pod_logs), self.dirs.pod_logs, "names")
            topology = read_numa_topology(self.dirs.sysfs) if has_sysfs else None
            names = read_pod_names(self.dirs.pod_logs) if has_logs else None
            cdi = read_cdi_specs(self.dirs.cdi_dirs)
            self._report_cdi(cdi.skipped)
            seen = (
                None if topology is None else topology.nodes,
                has_sysfs,
                None if names is None else names.pods,
                cdi.devices,
                cdi.unreadable,
                cdi.absent,
            )
            if seen == self._seen:
                return
            try:
                with self.store.transaction():
                    changed = 0
                    if has_sysfs:
                        changed += self.store.set_numa_topology(topology).events
                    if names is not None:
                        changed += self.store.set_pod_names(names).events
                    specs = self.store.set_cdi_specs(cdi)
            except PodStoreError as exc:
                log.error("recording the topology, pod names and CDI specs failed: %s", exc)
                return
            self._seen = seen
            if changed:
                log.info("recorded %d changes of the NUMA topology and pod names", changed)
            if specs.changed:
                log.info(
                    "recorded the CDI specs: %d devices, %d spec files written, %d removed",
                    specs.devices,
                    specs.written,
                    specs.removed,
                )

    def _report_cdi(self, skipped: tuple[str, ...]) -> None:
        """Each skipped spec or device once, while it stays skipped."""
        for reason in skipped:
            if reason not in self._cdi_said:
                log.warning("CDI spec skipped: %s", reason)
        self._cdi_said = frozenset(skipped)


def node_followers(
    store: PodStore, dirs: NodeDirs, interval: float, stats: dict[str, SyncStats]
) -> list[NodeFollower]:
    """A follower per kind, the device manager's first; ``stats`` gets each one's counters."""
    out = []
    for kind in KINDS:
        counters = stats.setdefault(kind, SyncStats())
        out.append(NodeFollower(store, dirs.path(kind), kind, interval=interval, stats=counters))
    return out


class FollowerGroup:
    """Followers run together until :meth:`stop` (safe in a signal handler)."""

    def __init__(self, followers: Sequence[Follower]) -> None:
        self.followers = list(followers)

    def stop(self) -> None:
        for f in self.followers:
            f.stop()

    def run(self, *, on_start: Callable[[], None] | None = None) -> None:
        """Run the first follower in this thread and the others in their own; returns when all
        have stopped."""
        first, *others = self.followers
        threads = [
            threading.Thread(target=f.run, name=f"podstore-follow-{i}", daemon=True)
            for i, f in enumerate(others, start=1)
        ]
        for t in threads:
            t.start()
        try:
            first.run(on_start=on_start)
        finally:
            for f in others:
                f.stop()
            for t in threads:
                t.join()
