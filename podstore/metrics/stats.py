"""What the follower counts (syncs by result, the last good and failed sync, durations) and
the shipping lag: plain figures, turned into Prometheus families at scrape time, so that this
module needs no prometheus_client (the follower and ``ship`` import it without the ``watch``
extra)."""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from podstore.pure.times import parse_ts

if TYPE_CHECKING:
    from podstore.store import PodStore

#: Every value of the ``result`` label of ``podstore_checkpoint_syncs_total``.
RESULTS = ("applied", "unchanged", "invalid", "missing", "error")

#: Upper bounds (seconds) of the sync-duration histogram buckets; +Inf is implied.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """A consistent copy of the counters."""

    syncs: dict[str, int]
    last_good_sync: float | None
    bucket_counts: tuple[int, ...]  # per bucket of BUCKETS, then +Inf; not cumulative
    duration_sum: float
    duration_count: int
    #: Wall-clock time of the last sync that failed (invalid, missing, error); None: none yet.
    last_failed_sync: float | None = None


@dataclass
class SyncStats:
    """Counters of one follower, safe to read from another thread."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _syncs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESULTS, 0))
    _last_good: float | None = None
    _buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    _sum: float = 0.0
    _last_failed: float | None = None

    def record(self, result: str, seconds: float, *, at: float | None = None) -> None:
        """Count one sync with its ``result`` (one of RESULTS) and how long it took."""
        if result not in self._syncs:
            raise ValueError(f"unknown sync result {result!r}")
        with self._lock:
            self._syncs[result] += 1
            if result in ("applied", "unchanged"):
                self._last_good = time.time() if at is None else at
            else:
                self._last_failed = time.time() if at is None else at
            self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                dict(self._syncs),
                self._last_good,
                tuple(self._buckets),
                self._sum,
                sum(self._buckets),
                self._last_failed,
            )


def lag(store: PodStore, last_seq: int) -> tuple[int, float]:
    """Node events after ``last_seq`` (the fleet's newest) and the age in seconds of the
    oldest of them (0 when none). Raises PodStoreError when the store cannot be read."""
    with store.reader() as reader:
        high = reader.high_water()
        oldest = reader.first_ts_after(last_seq)
    events = max(0, high - last_seq)
    if events == 0 or oldest is None:
        return events, 0.0
    return events, max(0.0, time.time() - parse_ts(oldest).timestamp())
