"""``watch --keep-history DURATION``: prune the node's history now and then, in the follower's
thread (so never racing its syncs), never past an event the fleet has not confirmed; until it
has confirmed anything to this process, nothing is pruned.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable

from podstore.errors import PodStoreError
from podstore.pure.times import format_ts
from podstore.store import PodStore
from podstore.watch.failures import ProblemLog

log = logging.getLogger("podstore")

#: Seconds between prunes (at most one per this much time).
PRUNE_EVERY = 600.0


class Pruner:
    """Prunes ``store``'s history older than ``keep`` seconds. ``shipped``: None when the
    watch does not ship, else the newest seq the fleet holds (None while not known)."""

    def __init__(
        self,
        store: PodStore,
        keep: float,
        *,
        every: float = PRUNE_EVERY,
        shipped: Callable[[], int | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not keep >= 0 or not every > 0:
            raise ValueError("expected keep >= 0 and every > 0")
        self.store = store
        self.keep = keep
        self.every = every
        self.shipped = shipped
        self.clock = clock
        self.last_run: float | None = None  # monotonic time of the last prune that ran
        self.pruned = 0  # events removed by this pruner, in all
        self._problems = ProblemLog(log)

    def due(self) -> bool:
        return self.last_run is None or time.monotonic() - self.last_run >= self.every

    def cut(self) -> str | None:
        """The stored time before which events may go now; None while the fleet has confirmed
        nothing. Raises PodStoreError."""
        cut = format_ts(datetime.datetime.fromtimestamp(self.clock() - self.keep, datetime.UTC))
        if self.shipped is None:
            return cut
        last = self.shipped()
        if last is None:
            return None
        # By time, not by seq: a clock that went back can give a later event an earlier
        # time, and the cut must pass none of the events the fleet lacks.
        with self.store.reader() as reader:
            oldest = reader.oldest_ts_after(last)
        if oldest is not None and oldest < cut:
            return oldest  # stored times sort as text
        return cut

    def prune(self) -> int | None:
        """Prune now; how many events went (None: none may yet). Raises PodStoreError."""
        before = self.cut()
        if before is None:
            return None
        removed = self.store.prune_history(before)
        self.pruned += removed
        if removed:
            log.info(
                "pruned %d history events older than %s",
                removed,
                before,
                extra={"event": "prune", "events": removed, "before": before},
            )
        return removed

    def maybe(self) -> None:
        """Prune when due; a failure is logged (once while it lasts), never raised."""
        if not self.due():
            return
        try:
            removed = self.prune()
        except PodStoreError as exc:
            self.last_run = time.monotonic()
            self._problems.report(str(exc), "pruning the history failed: %s", exc)
            return
        if removed is None:
            # Not counted as a run: it is tried again at the next sync or tick, which costs
            # nothing until the fleet has answered.
            self._problems.report(
                "unshipped",
                "not pruning the history yet: the fleet database has confirmed no event",
                level=logging.INFO,
            )
            return
        self.last_run = time.monotonic()
        self._problems.clear()
