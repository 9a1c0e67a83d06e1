"""The collector: every metric of the contract (docs/watch.md), read when scraped.

Store gauges come from one read-only statement (``storage/sql/metrics.GAUGES``) on the guarded
connection, so a scrape sees one committed snapshot and never holds a lock a writer needs.
The follower's counters (``podstore watch`` only) come from its :class:`SyncStats`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from podstore.metrics.stats import BUCKETS, RESULTS, SyncStats
from podstore.storage.sql import metrics as sql
from podstore.store import PodStore

# name → help text of the per-resource gauges, in exposition order.
_PER_RESOURCE = {
    "allocations": "(pod, container, resource) entries in the store",
    "allocated_devices": "distinct devices held by some entry",
    "registered_devices": "devices in the checkpoint's RegisteredDevices",
    "double_allocated_devices": "distinct devices held from more than one pod "
    "(v_double_allocations)",
}
_STORE_WIDE = {
    "pods": "pods in the store",
    "run_option_conflicts": "rows of v_run_option_conflicts",
    "history_events": "rows of allocation_events",
}


def _le(bound: float) -> str:
    return repr(float(bound))


class StoreCollector(Collector):
    """Reads ``store`` (and ``stats``, when following) at every collect."""

    def __init__(self, store: PodStore, stats: SyncStats | None = None) -> None:
        self.store = store
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        rows = self.store.query(sql.GAUGES).rows
        per_resource: dict[str, dict[str, int]] = {name: {} for name in _PER_RESOURCE}
        store_wide: dict[str, int] = dict.fromkeys(_STORE_WIDE, 0)
        for metric, resource, value in rows:
            if resource is None:
                store_wide[metric] = int(value)
            else:
                per_resource[metric][resource] = int(value)
        # Every resource that is held or registered reports every gauge, 0 where none.
        resources = sorted(
            set(per_resource["allocations"]) | set(per_resource["registered_devices"])
        )
        yield _gauge("pods", _STORE_WIDE["pods"], store_wide["pods"])
        for name, doc in _PER_RESOURCE.items():
            family = GaugeMetricFamily(f"podstore_{name}", doc, labels=["resource"])
            for resource in resources:
                family.add_metric([resource], per_resource[name].get(resource, 0))
            yield family
        for name in ("run_option_conflicts", "history_events"):
            yield _gauge(name, _STORE_WIDE[name], store_wide[name])
        sizes = GaugeMetricFamily(
            "podstore_store_size_bytes", "size of the store's files", labels=["file"]
        )
        for label, path in (("db", self.store.path), ("wal", self.store.path + "-wal")):
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            sizes.add_metric([label], size)
        yield sizes
        if self.stats is not None:
            yield from self._follower()

    def _follower(self) -> Iterator[Metric]:
        assert self.stats is not None
        snap = self.stats.snapshot()
        syncs = CounterMetricFamily(
            "podstore_checkpoint_syncs",
            "checkpoint syncs by result",
            labels=["result"],
        )
        for result in RESULTS:
            syncs.add_metric([result], snap.syncs[result])
        yield syncs
        yield _gauge(
            "checkpoint_last_sync_timestamp_seconds",
            "Unix time of the last applied or unchanged sync (0: none yet)",
            snap.last_good_sync or 0.0,
        )
        yield _gauge(
            "checkpoint_last_failed_sync_timestamp_seconds",
            "Unix time of the last sync that failed: invalid or missing file, store error "
            "(0: none yet)",
            snap.last_failed_sync or 0.0,
        )
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*map(_le, BUCKETS), "+Inf"), snap.bucket_counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "podstore_sync_duration_seconds",
            "time from reading the checkpoint to the committed sync",
            buckets=buckets,
            sum_value=snap.duration_sum,
        )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"podstore_{name}", doc, value=value)


def registry_for(store: PodStore, stats: SyncStats | None = None) -> CollectorRegistry:
    """A registry holding only podstore's collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, stats))
    return registry
