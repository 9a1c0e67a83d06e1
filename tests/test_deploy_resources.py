"""The DaemonSet's requests and limits and the units' memory settings against a measurement:
a real ``podstore watch`` at 1,000 entries shipping to a real PostgreSQL, as the DaemonSet
runs it (tests/harness/ops_resources.py; docs/deploy.md has the 10,000-entry figures the
settings were sized from), must fit them with room to spare."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.deploy import containers, unit
from harness.ops_resources import measure
from harness.pgserver import fleet_database

MIB = 1024 * 1024


def quantity(text: str) -> float:
    """A Kubernetes quantity: bytes for memory (Ki/Mi/Gi), cores for CPU (m)."""
    for suffix, factor in (("Ki", 1024), ("Mi", MIB), ("Gi", 1024 * MIB), ("m", 0.001)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def systemd_bytes(text: str) -> float:
    for suffix, factor in (("K", 1024), ("M", MIB), ("G", 1024 * MIB)):
        if text.endswith(suffix):
            return float(text[:-1]) * factor
    return float(text)


def test_settings_agree() -> None:
    watch = containers()["podstore-watch"]["resources"]
    service = unit("podstore-watch.service")["Service"]
    assert systemd_bytes(service["MemoryMax"][0]) == quantity(watch["limits"]["memory"])
    for c in containers().values():
        r = c["resources"]
        assert quantity(r["requests"]["memory"]) <= quantity(r["limits"]["memory"])
        assert quantity(r["requests"]["cpu"]) <= quantity(r["limits"]["cpu"])


@pytest.fixture(scope="module")
def fleet_url() -> Iterator[str]:
    with fleet_database("resources") as url:
        yield url


def test_a_1000_entry_follower_fits_the_limits(tmp_path: Path, fleet_url: str) -> None:
    figures = measure(1000, tmp_path, fleet_url)
    assert figures["shipping"] is True
    watch = containers()["podstore-watch"]["resources"]
    limit = quantity(watch["limits"]["memory"])
    request = quantity(watch["requests"]["memory"])
    # Peak resident set at most half the limit (the limit is sized for 10,000 entries), and
    # what it keeps after a cycle within the request.
    assert figures["peak_rss_mib"] * MIB <= limit / 2, figures
    for run in ("new_store", "restart"):
        assert figures[run]["idle_rss_mib"] * MIB <= request, figures
        # A one-entry change and a scrape take a small part of the CPU limit's second.
        cpu_limit = quantity(watch["limits"]["cpu"])
        assert figures[run]["change"]["cpu_s"] < 0.5 * cpu_limit, figures
        assert figures[run]["scrape"]["cpu_s"] < 0.5 * cpu_limit, figures
