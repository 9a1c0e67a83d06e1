"""The collector: every metric of the contract (docs/watch.md), read when scraped: the store's
gauges from read-only statements (so a scrape never holds a lock a writer needs), the
follower's counters from its :class:`SyncStats`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from podstore.metrics.stats import BUCKETS, RESULTS, SyncStats
from podstore.pure.times import format_ts
from podstore.storage import events
from podstore.storage.sql import intervals as intervals_sql
from podstore.storage.sql import metrics as sql
from podstore.storage.sql import node_read as node_sql
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


#: Seconds a reading of the device-seconds counter is reused for, at least.
DEVICE_SECONDS_EVERY = 60.0


def _le(bound: float) -> str:
    return repr(float(bound))


class StoreCollector(Collector):
    """Reads ``store`` and ``stats`` (per checkpoint kind; a single one is the device
    manager's) at every collect."""

    def __init__(
        self,
        store: PodStore,
        stats: SyncStats | Mapping[str, SyncStats] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.clock = clock
        #: The device-seconds counter's last reading: (when, what it cost in seconds, rows).
        self._reading: tuple[float, float, list[tuple[str, str, float]]] | None = None
        self.stats: dict[str, SyncStats] | None
        if stats is None or isinstance(stats, Mapping):
            self.stats = None if stats is None else dict(stats)
        else:
            self.stats = {"devices": stats}

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
        yield from self._node()
        yield self._device_seconds()
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

    def _device_seconds(self) -> Metric:
        """Device-seconds held up to now, from the history's intervals (no pod labels: their
        number grows without bound). Pruning the history lowers it: a counter reset.

        The reading covers the whole history (2.9 s of CPU over a year of a 1,000-pod node), so
        a scrape reuses the last one while it is younger than :data:`DEVICE_SECONDS_EVERY` or
        twenty times what it cost: the counter then moves in steps."""
        now = self.clock()
        last = self._reading
        if last is None or now - last[0] >= max(DEVICE_SECONDS_EVERY, 20 * last[1]):
            # The clock the history is stamped with (tests set it): an end written after a
            # reading is never before the time that reading counted an open holding to.
            until = format_ts(events.utcnow())
            rows = [
                (str(resource), str(namespace), float(value or 0.0))
                for resource, namespace, value in self.store.query(
                    intervals_sql.DEVICE_SECONDS, {"until": until}
                ).rows
            ]
            last = self._reading = (now, self.clock() - now, rows)
        family = CounterMetricFamily(
            "podstore_device_seconds",
            "device-seconds held, from the allocation intervals the history keeps, shares "
            "applied (v_allocation_intervals)",
            labels=["resource", "namespace"],
        )
        for resource, namespace, value in last[2]:
            family.add_metric([resource, namespace], value)
        return family

    def _node(self) -> Iterator[Metric]:
        per_numa = {
            "exclusive_cpus": GaugeMetricFamily(
                "podstore_exclusive_cpus",
                "CPUs held exclusively by containers (v_cpu_assignments)",
                labels=["numa_node"],
            ),
            "shared_cpus": GaugeMetricFamily(
                "podstore_shared_cpus",
                "CPUs in the CPU manager's shared pool (v_shared_cpus)",
                labels=["numa_node"],
            ),
        }
        memory = GaugeMetricFamily(
            "podstore_memory_assigned_bytes",
            "memory the memory manager reserved for containers (v_memory_numa.reserved)",
            labels=["numa_node", "memory_type"],
        )
        dra = GaugeMetricFamily(
            "podstore_dra_allocated_devices",
            "distinct devices DRA drivers prepared for claims",
            labels=["driver"],
        )
        misaligned = physical = 0
        for metric, numa, label, value in self.store.query(node_sql.NODE_GAUGES).rows:
            node = "unknown" if numa is None else str(numa)
            if metric in per_numa:
                per_numa[metric].add_metric([node], int(value))
            elif metric == "memory_assigned_bytes":
                memory.add_metric([node, str(label)], int(value))
            elif metric == "dra_allocated_devices":
                dra.add_metric([str(label)], int(value))
            elif metric == "physical_double_allocations":
                physical = int(value)
            else:
                misaligned = int(value)
        yield from per_numa.values()
        yield memory
        yield dra
        yield _gauge(
            "numa_misaligned_containers",
            "containers whose devices, CPUs and memory are not on the same NUMA nodes "
            "(v_numa_misaligned)",
            misaligned,
        )
        yield _gauge(
            "physical_double_allocations",
            "physical devices held from more than one pod without declared sharing, across "
            "device plugins and DRA (v_physical_double_allocations)",
            physical,
        )

    def _follower(self) -> Iterator[Metric]:
        assert self.stats is not None
        snaps = {kind: stats.snapshot() for kind, stats in sorted(self.stats.items())}
        syncs = CounterMetricFamily(
            "podstore_checkpoint_syncs",
            "checkpoint syncs by result and checkpoint kind",
            labels=["result", "checkpoint"],
        )
        for kind, snap in snaps.items():
            for result in RESULTS:
                syncs.add_metric([result, kind], snap.syncs[result])
        yield syncs
        last = GaugeMetricFamily(
            "podstore_checkpoint_last_sync_timestamp_seconds",
            "Unix time of the last applied or unchanged sync (0: none yet)",
            labels=["checkpoint"],
        )
        for kind, snap in snaps.items():
            last.add_metric([kind], snap.last_good_sync or 0.0)
        yield last
        failed = GaugeMetricFamily(
            "podstore_checkpoint_last_failed_sync_timestamp_seconds",
            "Unix time of the last sync that failed: invalid or missing file, store error "
            "(0: none yet)",
            labels=["checkpoint"],
        )
        for kind, snap in snaps.items():
            failed.add_metric([kind], snap.last_failed_sync or 0.0)
        yield failed
        durations = HistogramMetricFamily(
            "podstore_sync_duration_seconds",
            "time from reading the checkpoint to the committed sync",
            labels=["checkpoint"],
        )
        for kind, snap in snaps.items():
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            bounds = (*map(_le, BUCKETS), "+Inf")
            for bound, count in zip(bounds, snap.bucket_counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            durations.add_metric([kind], buckets, snap.duration_sum)
        yield durations


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"podstore_{name}", doc, value=value)


def registry_for(
    store: PodStore, stats: SyncStats | Mapping[str, SyncStats] | None = None
) -> CollectorRegistry:
    """A registry holding only podstore's collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, stats))
    return registry
