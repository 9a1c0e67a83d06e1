"""The CRI metrics of ``podstore watch --cri-socket``: whether the runtime answered the last
poll, polls by result, and end events written from its exit times (docs/watch.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class CriCollector(Collector):
    """``podstore_cri_*`` of one watch's runtime evidence (``watch/cri.py``'s CriEvidence)."""

    def __init__(self, cri: Any) -> None:
        self.cri = cri

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "podstore_cri_up",
            "1 when the container runtime answered the last poll, else 0",
            value=1 if self.cri.up else 0,
        )
        polls = CounterMetricFamily(
            "podstore_cri_polls", "polls of the container runtime by result", labels=["result"]
        )
        for result, count in sorted(self.cri.polls.items()):
            polls.add_metric([result], count)
        yield polls
        yield CounterMetricFamily(
            "podstore_cri_ends",
            "end events written from containers' exit times",
            value=self.cri.recorded,
        )
