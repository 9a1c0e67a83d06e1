"""The gauges of ``podstore watch --kubelet-version`` (docs/watch.md): read from the verdicts
the follower last computed, so a scrape judges nothing. prometheus_client (the ``watch``
extra) loads only when the collector is made, so that ``podstore watch`` without the extra
still gets as far as saying which extra to install."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class Judged:
    """One file's verdict as the gauges show it."""

    kind: str
    kubelet_version: str
    refused: bool
    drops: int


def release_collector(current: Callable[[], Iterable[Judged]]) -> Collector:
    """The collector of the two gauges over what ``current()`` returns at each scrape."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    class ReleaseCollector(Collector):
        def collect(self) -> Iterator[Metric]:
            labels = ["kind", "kubelet_version"]
            refused = GaugeMetricFamily(
                "podstore_kubelet_release_refused",
                "1 when that kubelet release would refuse to start on the file now",
                labels=labels,
            )
            drops = GaugeMetricFamily(
                "podstore_kubelet_release_drops",
                "what that kubelet release would lose reading the file now (verdict drops)",
                labels=labels,
            )
            for j in current():
                refused.add_metric([j.kind, j.kubelet_version], 1 if j.refused else 0)
                drops.add_metric([j.kind, j.kubelet_version], j.drops)
            yield refused
            yield drops

    return ReleaseCollector()
