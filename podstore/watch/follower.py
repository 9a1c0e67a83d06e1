"""The follower: sync at start, then on every change of the checkpoint file, until stopped.

Wake-ups during a sync collapse into one more sync (a burst of rewrites costs a few syncs, the
last good file wins); between events a stat every ``interval`` catches a lost one. A problem
is logged when it appears, changes and clears.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from podstore.errors import CheckpointError, CheckpointNotFoundError, PodStoreError
from podstore.metrics.stats import SyncStats
from podstore.storage import sync
from podstore.store import PodStore, sessions_of
from podstore.types import NodeSyncReport, SyncReport
from podstore.watch.failures import Backoff, ProblemLog
from podstore.watch.health import Pulse
from podstore.watch.trigger import FileTrigger, Signature, signature
from podstore.watch.wakeup import Wakeup

log = logging.getLogger("podstore")

#: Where kubelet keeps the file (``DevicePluginPath`` + ``kubelet_internal_checkpoint``).
DEFAULT_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

#: First retry after a store error (seconds); it doubles up to the polling interval.
RETRY_FIRST = 0.5


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """One sync: its result (``applied``, ``unchanged``, ``invalid``, ``missing``, ``error``),
    how long it took, and the report or the problem."""

    result: str
    seconds: float
    report: SyncReport | NodeSyncReport | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.result in ("applied", "unchanged")


def classify(exc: BaseException) -> str:
    if isinstance(exc, CheckpointNotFoundError):
        return "missing"
    if isinstance(exc, CheckpointError):
        return "invalid"
    return "error"


class Follower:
    """Keeps ``store`` equal to the checkpoint at ``path``. ``on_sync`` hooks (after every
    sync) and ``on_tick`` hooks (every poll) run in its thread and must return quickly."""

    def __init__(
        self,
        store: PodStore,
        path: str,
        *,
        interval: float = 10.0,
        stats: SyncStats | None = None,
        on_sync: list[Callable[[SyncOutcome], None]] | None = None,
        on_tick: list[Callable[[], None]] | None = None,
    ) -> None:
        self.store = store
        self.path = path
        self._sessions = sessions_of(store)
        self.interval = interval
        self.stats = stats if stats is not None else SyncStats()
        self.on_sync = list(on_sync or ())
        self.on_tick = list(on_tick or ())
        self.wakeup = Wakeup()
        self._stopping = False
        self._problems = ProblemLog(log, cleared="%s: good again")
        self._seen: Signature = None
        self._retry_at: float | None = None
        self._backoff = Backoff(RETRY_FIRST, max(interval, RETRY_FIRST))
        self.pulse = Pulse()

    # ---- one sync -------------------------------------------------------------------------

    def sync(self) -> SyncOutcome:
        """Sync once (never raises for a bad file or a store error: the outcome says)."""
        self.pulse.sync_started()
        seen = signature(self.path)
        started = time.perf_counter()
        try:
            report = self._apply()
        except PodStoreError as exc:
            outcome = SyncOutcome(classify(exc), time.perf_counter() - started, problem=str(exc))
        except Exception as exc:  # a bug must not stop a node's follower; it is logged whole
            log.exception("sync of %s failed", self.path)
            outcome = SyncOutcome("error", time.perf_counter() - started, problem=repr(exc))
        else:
            outcome = SyncOutcome(report.result, time.perf_counter() - started, report=report)
        # The signature from before the read: a rewrite during the read is seen next time.
        self._seen = seen
        self.stats.record(outcome.result, outcome.seconds)
        self.pulse.sync_ended(outcome.result)
        self._log(outcome)
        self._schedule_retry(outcome)
        for hook in self.on_sync:
            hook(outcome)
        return outcome

    def _apply(self) -> SyncReport | NodeSyncReport:
        return sync.sync_file(self._sessions, self.path)

    def _log(self, outcome: SyncOutcome) -> None:
        if outcome.ok:
            self._problems.clear(self.path)
            report = outcome.report
            if isinstance(report, SyncReport) and report.changed:
                log.info(
                    "applied %s in %.3f s: %d inserted, %d replaced, %d deleted, "
                    "%d registered, %d unregistered%s",
                    self.path,
                    outcome.seconds,
                    report.inserted,
                    report.replaced,
                    report.deleted,
                    report.registered,
                    report.unregistered,
                    f", {len(report.skipped)} entries skipped" if report.skipped else "",
                    extra={
                        "event": "sync",
                        "checkpoint": self.path,
                        "result": outcome.result,
                        "seconds": round(outcome.seconds, 6),
                        "inserted": report.inserted,
                        "replaced": report.replaced,
                        "deleted": report.deleted,
                    },
                )
            return
        problem = f"{outcome.result}: {outcome.problem}"
        level = logging.WARNING if outcome.result in ("missing", "invalid") else logging.ERROR
        self._problems.report(
            problem,
            "sync %s (store left as it was)",
            problem,
            level=level,
            fields={"event": "sync", "checkpoint": self.path, "result": outcome.result},
        )

    def _schedule_retry(self, outcome: SyncOutcome) -> None:
        # A store error (busy, disk full) is retried on its own; a bad or missing file waits
        # for the file to change.
        if outcome.result == "error":
            self._retry_at = time.monotonic() + self._backoff.next()
        else:
            self._retry_at = None
            self._backoff.reset()

    # ---- following ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to end after the sync in progress (safe in a signal handler)."""
        self._stopping = True
        self.wakeup.ring()

    def run(self, *, on_start: Callable[[], None] | None = None) -> None:
        """Sync now, then whenever the file changes, until :meth:`stop`."""
        self.pulse.running()
        trigger = FileTrigger(self.path, self.wakeup.ring)
        trigger.start()
        try:
            self.sync()
            if on_start is not None:
                on_start()
            next_poll = time.monotonic() + self.interval
            while not self._stopping:
                deadline = next_poll if self._retry_at is None else min(next_poll, self._retry_at)
                woke = self.wakeup.wait(max(0.0, deadline - time.monotonic()))
                self.pulse.beat()
                if self._stopping:
                    break
                now = time.monotonic()
                due = self._retry_at is not None and now >= self._retry_at
                if now >= next_poll:
                    next_poll = now + self.interval
                    # The safety net: move the watch if directories came or went, and sync
                    # if the file is not the one last seen (an event may have been lost).
                    if trigger.refresh() or signature(self.path) != self._seen:
                        woke = True
                    for tick in self.on_tick:
                        tick()
                elif trigger.needs_refresh and trigger.refresh():
                    woke = True
                if woke or due:
                    self.sync()
        finally:
            self.pulse.stopped()
            trigger.stop()
            self.wakeup.close()
