"""The gauges of ``podstore watch --kubelet-version`` (docs/watch.md): read from the verdicts
the follower last computed, so a scrape judges nothing."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podstore.watch.release_verdicts import ReleaseVerdicts


class ReleaseCollector(Collector):
    def __init__(self, verdicts: ReleaseVerdicts) -> None:
        self.verdicts = verdicts

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
        for j in self.verdicts.current():
            refused.add_metric([j.kind, j.kubelet_version], 1 if j.refused else 0)
            drops.add_metric([j.kind, j.kubelet_version], j.drops)
        yield refused
        yield drops
