"""A holding's share is fixed when it begins (docs/sql.md, "v_allocation_intervals"), so the
billed past never changes: ``podstore_device_seconds_total`` (read through the real metrics
collector) never goes down and ``podstore usage`` over a past window gives the same answer
whatever happens later — a second DRA claim sharing a held device, the device plugin
re-registering another number of replicas. A replica's share comes from the registration in
force at its start (one written in the same change counts, whichever event came first); with
none in the history, the current one stands in.

The history's clock is set by the test (``events.utcnow``); the counter counts open holdings
up to it too."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from harness import history_clock
from harness.cli import podstore
from harness.history_clock import T0, Clock, at

from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import DRAClaim, DRADevice, DRAState, PodName, dumps_checkpoint

SHARED = "nvidia.com/gpu.shared"
DRIVER = "gpu.example.com"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return history_clock.install(monkeypatch)


def counter(store: PodStore) -> dict[tuple[str, str], float]:
    """podstore_device_seconds_total per (resource, namespace), as a scrape reads it."""
    from prometheus_client.parser import text_string_to_metric_families

    from podstore.metrics.collector import registry_for
    from podstore.metrics.exposition import render

    (family,) = [
        f
        for f in text_string_to_metric_families(render(registry_for(store)).decode())
        if f.name == "podstore_device_seconds"
    ]
    return {
        (s.labels["resource"], s.labels["namespace"]): s.value
        for s in family.samples
        if s.name == "podstore_device_seconds_total"
    }


class Readings:
    """Successive counter readings: each series is at least what it was."""

    def __init__(self, store: PodStore) -> None:
        self.store = store
        self.last: dict[tuple[str, str], float] = {}

    def check(self) -> dict[tuple[str, str], float]:
        now = counter(self.store)
        for series, value in self.last.items():
            assert now.get(series, 0.0) >= value, (series, value, now.get(series))
        self.last = now
        return now


def usage(store: PodStore, since: float, until: float, by: str = "pod") -> dict[str, float]:
    """``podstore usage --by BY`` over [since, until) as its JSON gives it: key → seconds."""
    run = podstore(
        "--db", store.path, "usage", "--by", by, "--since", at(since), "--until", at(until),
        "-o", "json", cwd=Path(store.path).parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    key = {"pod": "pod_uid", "physical": "physical_id"}[by]
    return {r[key]: r["device_seconds"] for r in json.loads(run.stdout)}


def shares(store: PodStore) -> dict[tuple[str, str], float]:
    rows = store.query("SELECT pod_uid, device, share FROM v_allocation_intervals").rows
    return {(r[0], r[1]): r[2] for r in rows}


def replicas(n: int, *more: str) -> dict[str, list[str] | None]:
    return {SHARED: [*(f"GPU-6::{r}" for r in range(n)), *more]}


def hold(store: PodStore, pod: str, device: str) -> None:
    store.insert(pod, "main", SHARED, {0: [device]}, b"")


def claim(name: str, pod: str, share: str | None = "s") -> DRAClaim:
    device = DRADevice("pool", "gpu-0", ["gpu"], [], f"{share}-{name}" if share else None)
    return DRAClaim(f"{name}-c1a1-4000-8000-000000000000", name, "team-a", frozenset({pod}),
                    {DRIVER: [device]})  # fmt: skip


def test_a_second_dra_claim_sharing_a_held_device_leaves_the_past_alone(
    store: PodStore, clock: Clock
) -> None:
    """One claim holds the device for an hour, then a second shares it: the first holding
    stays whole (its past is not re-billed at a half), the counter only grows, and the first
    hour's usage stays an hour however the sharing goes on and ends."""
    store.set_pod_names({"pa": PodName("team-a", "a"), "pb": PodName("team-a", "b")})
    readings = Readings(store)
    store.set_dra_state(DRAState([claim("a", "pa")], share_ids=True))
    readings.check()
    first_hour = usage(store, 0, 3600)
    assert first_hour == {"pa": 3600.0}
    clock.set(3600)
    assert readings.check() == {(DRIVER, "team-a"): 3600.0}
    store.set_dra_state(DRAState([claim("a", "pa"), claim("b", "pb")], share_ids=True))
    assert readings.check() == {(DRIVER, "team-a"): 3600.0}
    assert usage(store, 0, 3600) == first_hour
    assert shares(store) == {("pa", "pool/gpu-0"): 1.0, ("pb", "pool/gpu-0"): 1.0}
    clock.set(7200)
    store.set_dra_state(DRAState([claim("b", "pb")], share_ids=True))  # a ends
    readings.check()
    clock.set(9000)
    store.set_dra_state(DRAState([], share_ids=True))  # b ends
    last = readings.check()
    assert usage(store, 0, 3600) == first_hour
    assert usage(store, 0, 9000) == {"pa": 7200.0, "pb": 5400.0}
    assert last == {(DRIVER, "team-a"): 12600.0}
    # The now-view still splits a device among the claims holding it now.
    store.set_dra_state(DRAState([claim("a", "pa"), claim("b", "pb")], share_ids=True))
    now = store.query("SELECT share FROM v_physical_devices").rows
    assert [r[0] for r in now] == [0.5, 0.5]


def test_re_registering_replicas_leaves_the_past_alone(store: PodStore, clock: Clock) -> None:
    """A replica held while the plugin re-registers its replicas 2 → 4 → 2 keeps the half it
    began with; one taken under four keeps its quarter; each window's usage and the counter
    are what they were."""
    store.set_pod_names({"p1": PodName("team-a", "a"), "p2": PodName("team-a", "b")})
    readings = Readings(store)
    store.set_registered_devices(replicas(2))
    hold(store, "p1", "GPU-6::0")
    readings.check()
    clock.set(1000)
    assert readings.check() == {(SHARED, "team-a"): 500.0}
    store.set_registered_devices(replicas(4))
    assert readings.check() == {(SHARED, "team-a"): 500.0}
    assert shares(store) == {("p1", "GPU-6::0"): 0.5}
    clock.set(1500)
    hold(store, "p2", "GPU-6::3")
    before = usage(store, 0, 2000)
    assert before == {"p1": 1000.0, "p2": 125.0}
    clock.set(2000)
    assert readings.check() == {(SHARED, "team-a"): 1000.0 + 125.0}
    store.set_registered_devices(replicas(2))
    assert readings.check() == {(SHARED, "team-a"): 1000.0 + 125.0}
    assert usage(store, 0, 2000) == before
    assert shares(store) == {("p1", "GPU-6::0"): 0.5, ("p2", "GPU-6::3"): 0.25}
    clock.set(3000)
    store.delete(["p1", "p2"])
    assert readings.check() == {(SHARED, "team-a"): 3000 * 0.5 + 1500 * 0.25}
    store.set_registered_devices(replicas(8))
    assert readings.check() == {(SHARED, "team-a"): 3000 * 0.5 + 1500 * 0.25}
    assert usage(store, 0, 2000) == before


def test_all_replicas_held_add_up_to_the_device(store: PodStore, clock: Clock) -> None:
    """Every replica of a base held for an hour is one device-hour, before and after the
    plugin registers another count."""
    store.set_registered_devices(replicas(4, "GPU-7::0", "GPU-7::1"))
    for r in range(4):
        hold(store, f"p{r}", f"GPU-6::{r}")
    clock.set(3600)
    store.delete([f"p{r}" for r in range(4)])
    whole = {f"device-plugin:{SHARED}:GPU-6": 3600.0}
    assert usage(store, 0, 3600, by="physical") == whole
    clock.set(4000)
    # Eight: the four held stay registered (a replica neither held nor registered any more
    # is its own physical id, docs/sql.md).
    store.set_registered_devices(replicas(8))
    assert usage(store, 0, 3600, by="physical") == whole


def test_a_registration_of_the_same_change_counts_whichever_came_first(
    store: PodStore, clock: Clock, tmp_path: Path
) -> None:
    """A sync that re-registers the replicas and adds an entry writes the registration first;
    a change that writes the registration after the entry, at the same instant, counts as
    well. The next change's registration does not."""
    store.set_registered_devices(replicas(2))
    clock.set(10)
    file = tmp_path / "kubelet_internal_checkpoint"
    entry = PodDevicesEntry("p1", "main", SHARED, {0: ["GPU-6::0"]}, b"")
    file.write_bytes(dumps_checkpoint([entry], replicas(4)))
    report = store.sync_checkpoint(file)
    assert (report.registered, report.inserted) == (1, 1)
    ops = [(e.op, e.pod_uid) for e in store.history() if e.timestamp == T0 + timedelta(seconds=10)]
    assert ops == [("registered", None), ("insert", "p1")]
    clock.set(20)
    with store.transaction():
        hold(store, "p2", "GPU-6::1")
        store.set_registered_devices(replicas(8))
    ops = [(e.op, e.pod_uid) for e in store.history() if e.timestamp == T0 + timedelta(seconds=20)]
    assert ops == [("insert", "p2"), ("registered", None)]
    clock.set(30)
    hold(store, "p3", "GPU-6::2")
    clock.set(30.000001)
    store.set_registered_devices(replicas(2))
    assert shares(store) == {
        ("p1", "GPU-6::0"): 0.25,
        ("p2", "GPU-6::1"): 0.125,
        ("p3", "GPU-6::2"): 0.125,
    }


def test_without_its_registration_in_the_history_a_holding_takes_the_current_one(
    store: PodStore, clock: Clock
) -> None:
    """No registration before the holding (never recorded, unregistered since, or pruned): the
    current registration's share, and whole where that does not count the replicas either. A
    registration in force that lists no replica of the base counts it whole."""
    hold(store, "never", "GPU-6::0")  # before any registration
    clock.set(10)
    store.set_registered_devices({SHARED: ["GPU-6::0", "GPU-6::1"], "other": ["x"]})
    clock.set(20)
    store.set_registered_devices({"other": ["x"]})  # SHARED unregistered
    clock.set(30)
    hold(store, "gone", "GPU-6::1")
    clock.set(40)
    store.set_registered_devices({SHARED: ["GPU-9::0"], "other": ["x"]})
    clock.set(50)
    hold(store, "unlisted", "GPU-6::2")  # the registration in force has no GPU-6 replica
    hold(store, "listed", "GPU-9::0")
    assert shares(store) == {
        ("never", "GPU-6::0"): 1.0,  # the current registration knows no GPU-6 replica either
        ("gone", "GPU-6::1"): 1.0,
        ("unlisted", "GPU-6::2"): 1.0,
        ("listed", "GPU-9::0"): 1.0,
    }
    clock.set(60)
    store.set_registered_devices(replicas(4))
    assert shares(store) == {
        ("never", "GPU-6::0"): 0.25,
        ("gone", "GPU-6::1"): 0.25,
        ("unlisted", "GPU-6::2"): 1.0,
        ("listed", "GPU-9::0"): 1.0,
    }


def test_a_holding_whose_registration_was_pruned_takes_the_current_one(
    store: PodStore, clock: Clock
) -> None:
    store.set_registered_devices(replicas(2))
    clock.set(10)
    hold(store, "p1", "GPU-6::0")
    clock.set(20)
    store.set_registered_devices(replicas(4))
    assert shares(store) == {("p1", "GPU-6::0"): 0.5}
    clock.set(30)
    # The first registration goes (the second is its resource's state); p1's insert stays.
    assert store.prune_history(at(25)) == 1
    assert [e.op for e in store.history()] == ["insert", "registered"]
    assert shares(store) == {("p1", "GPU-6::0"): 0.25}


def test_the_lookups_are_index_backed(store: PodStore, clock: Clock) -> None:
    """Per interval, the registration in force is found through the history's key index and
    the instant's end through the seq; the replica counts are computed once; the device's
    identity now is looked up by an index whatever the caller's WHERE on the times."""
    from podstore.storage.sql.intervals import DEVICE_SECONDS, usage_sql

    store.set_registered_devices(replicas(2))
    hold(store, "p1", "GPU-6::0")
    window = {"since": at(0), "until": at(10), "resource": None}
    for sql, params in (
        ("SELECT * FROM v_allocation_intervals", {}),
        (usage_sql("physical", False), window),
        (DEVICE_SECONDS, {"until": at(10)}),
    ):
        plan = [r[3] for r in store.query("EXPLAIN QUERY PLAN " + sql, params).rows]
        assert (
            "SEARCH g USING INDEX ix_allocation_events_key "
            "(pod_uid=? AND container=? AND resource=? AND seq<?)"
        ) in plan, sql
        assert "SEARCH x USING INTEGER PRIMARY KEY (rowid>?)" in plan, sql
        assert "SEARCH c USING AUTOMATIC COVERING INDEX (seq=? AND base=?)" in plan, sql
        assert plan.count("MATERIALIZE replica_counts") == 1, sql
        assert (
            "SEARCH d USING AUTOMATIC COVERING INDEX (mechanism=? AND resource=? AND device=?)"
            " LEFT-JOIN"
        ) in plan, sql
