"""The shipping metrics of ``podstore watch --ship-to…``: calls by outcome from the fleet's
``ShippingStatus`` (only its ``snapshot()``, so the metrics never import the fleet package),
and the lag behind the node, read at every scrape (two indexed reads) so that it rises while
the fleet is down, even between the shipper's retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podstore.errors import PodStoreError
from podstore.metrics.stats import lag
from podstore.store import PodStore


class ShippingSource(Protocol):
    """What the collector reads: ``podstore.fleet.status.ShippingStatus``."""

    def snapshot(self) -> Any: ...


class ShippingCollector(Collector):
    """``podstore_ship_*`` of one store's shipping (docs/watch.md lists them)."""

    def __init__(self, store: PodStore, status: ShippingSource) -> None:
        self.store = store
        self.status = status

    def collect(self) -> Iterator[Metric]:
        f = self.status.snapshot()
        for name, doc, value in (
            ("successes", "ships that completed", f.successes),
            ("failures", "ships that failed (server down or unreachable, refused, …)", f.failures),
            ("refusals", "ships the fleet database refused (another node's store, a diverged "
             "chain, retired); also counted as failures", f.refusals),
        ):  # fmt: skip
            yield CounterMetricFamily(f"podstore_ship_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "podstore_ship_last_success_timestamp_seconds",
            "Unix time of the last ship that completed (0: none yet)",
            value=f.last_success or 0.0,
        )
        if f.last_seq is None:
            # The fleet database never answered this process: how far behind it is is not
            # known, so the lag and last seq are left out (the failures say why).
            return
        yield GaugeMetricFamily(
            "podstore_ship_last_seq",
            "the newest node event seq the fleet database holds",
            value=f.last_seq,
        )
        try:
            events, seconds = lag(self.store, f.last_seq)
        except PodStoreError:
            events, seconds = f.lag_events, f.lag_seconds  # as of the last ship
        if events is None or seconds is None:
            return
        yield GaugeMetricFamily(
            "podstore_ship_lag_events",
            "node events the fleet database does not hold yet",
            value=events,
        )
        yield GaugeMetricFamily(
            "podstore_ship_lag_seconds",
            "age of the oldest node event the fleet database does not hold yet (0: none)",
            value=seconds,
        )
