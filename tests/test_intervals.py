"""Allocation intervals (docs/sql.md, "v_allocation_intervals"): each end source alone, end
sources racing (the earliest wins, recorded once), a history pruned in the middle, and the
usage arithmetic (clipping, open intervals, shares).

The history's clock is set by the test (``events.utcnow``), so every time is exact."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import history_clock
from harness.history_clock import Clock, at
from harness.nodegen import GPU, NIC, Node, pod_uid

from podstore import PodStore
from podstore.checkpoint import PodName
from podstore.errors import InvalidInputError
from podstore.storage.sql.intervals import usage_sql


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return history_clock.install(monkeypatch)


COLUMNS = 'mechanism, resource, device, pod_uid, container, start, "end", end_source'


def intervals(store: PodStore, where: str = "1") -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in store.query(
            f"SELECT {COLUMNS} FROM v_allocation_intervals WHERE {where} "
            "ORDER BY pod_uid, mechanism, device, start"
        ).rows
    ]


def end_events(store: PodStore) -> list[tuple[Any, ...]]:
    return [
        (e.pod_uid, e.container_name, e.resource_name, e.payload)
        for e in store.history()
        if e.op == "end"
    ]


def gpu(store: PodStore, pod: str, device: str, container: str = "main") -> None:
    store.insert(pod, container, GPU, {0: [device]}, b"")


def test_checkpoint_alone_ends_at_the_delete(store: PodStore, clock: Clock) -> None:
    gpu(store, "p1", "G1")
    clock.set(30)
    store.delete(["p1"])
    # Evidence later than the delete ends nothing: no event.
    assert store.record_ends([("p1", None, "pod-logs", at(45))]) == 0
    assert intervals(store) == [
        ("device-plugin", GPU, "G1", "p1", "main", at(0), at(30), "checkpoint")
    ]
    assert end_events(store) == []


def test_an_entry_held_now_is_open(store: PodStore, clock: Clock) -> None:
    gpu(store, "p1", "G1")
    clock.set(5)
    # A replace that keeps G1 and adds G2: G1's holding goes on, G2's begins.
    store.insert("p1", "main", GPU, {0: ["G1", "G2"]}, b"")
    clock.set(9)
    store.insert("p1", "main", GPU, {0: ["G2"]}, b"")
    assert intervals(store) == [
        ("device-plugin", GPU, "G1", "p1", "main", at(0), at(9), "checkpoint"),
        ("device-plugin", GPU, "G2", "p1", "main", at(5), None, None),
    ]


def _cpu_and_memory(node: Node, pods: set[int]) -> tuple[Any, Any]:
    cpu, memory = node.cpu(), node.memory()
    held = {pod_uid(i) for i in pods}
    cpu = replace(cpu, entries={k: v for k, v in cpu.entries.items() if k in held})
    assert memory.entries is not None
    memory = replace(memory, entries={k: v for k, v in memory.entries.items() if k in held})
    return cpu, memory


@pytest.mark.parametrize("kind", ["cpu", "memory"])
def test_the_container_leaving_a_manager_ends_it(store: PodStore, clock: Clock, kind: str) -> None:
    node = Node(2)
    p0, p1 = pod_uid(0), pod_uid(1)
    cpu, memory = _cpu_and_memory(node, {0, 1})
    store.set_cpu_state(cpu)
    store.set_memory_state(memory)
    gpu(store, p0, "G0")
    gpu(store, p1, "G1")
    clock.set(40)
    cpu, memory = _cpu_and_memory(node, {1})
    if kind == "cpu":
        store.set_cpu_state(cpu)
    else:
        store.set_memory_state(memory)
    assert intervals(store) == [
        ("device-plugin", GPU, "G0", p0, "main", at(0), at(40), kind),
        ("device-plugin", GPU, "G1", p1, "main", at(0), None, None),
    ]
    # The entry itself leaves the device file later: that records nothing more.
    clock.set(90)
    store.delete([p0])
    assert intervals(store, f"pod_uid = '{p0}'")[0][-2:] == (at(40), kind)
    assert len(end_events(store)) == 1


def test_the_pod_log_directory_going_ends_device_and_dra_holdings(
    store: PodStore, clock: Clock
) -> None:
    node = Node(2)
    p0, p1 = pod_uid(0), pod_uid(1)
    store.set_pod_names({p0: PodName("team-a", "x"), p1: PodName("team-b", "y")})
    store.set_dra_state(node.dra())
    gpu(store, p0, "G0")
    gpu(store, p1, "G1")
    clock.set(25)
    store.set_pod_names({p1: PodName("team-b", "y")})
    rows = intervals(store, f"pod_uid = '{p0}'")
    assert rows == [
        ("device-plugin", GPU, "G0", p0, "main", at(0), at(25), "pod-logs"),
        ("dra", NIC, "pool-a/nic-0", p0, None, at(0), at(25), "pod-logs"),
    ]
    assert {r[-1] for r in intervals(store, f"pod_uid = '{p1}'")} == {None}
    # The names it had stay (the history's last name for the pod).
    (ns,) = store.query(
        f"SELECT DISTINCT namespace FROM v_allocation_intervals WHERE pod_uid = '{p0}'"
    ).rows
    assert ns == ("team-a",)


def test_the_claim_leaving_the_dra_file_ends_it(store: PodStore, clock: Clock) -> None:
    node = Node(2)
    store.set_dra_state(node.dra())
    clock.set(12)
    state = node.dra()
    assert state.claims is not None
    store.set_dra_state(replace(state, claims=state.claims[1:]))
    assert intervals(store, "mechanism = 'dra'") == [
        ("dra", NIC, "pool-a/nic-0", pod_uid(0), None, at(0), at(12), "dra"),
        ("dra", NIC, "pool-a/nic-1", pod_uid(1), None, at(0), None, None),
    ]


def test_runtime_alone(store: PodStore, clock: Clock) -> None:
    gpu(store, "p1", "G1")
    gpu(store, "p1", "G2", container="side")
    clock.set(100)
    assert store.record_ends([("p1", "main", "runtime", at(61.5))]) == 1
    assert intervals(store) == [
        ("device-plugin", GPU, "G1", "p1", "main", at(0), at(61.5), "runtime"),
        ("device-plugin", GPU, "G2", "p1", "side", at(0), None, None),
    ]


def test_evidence_is_recorded_once_and_a_later_one_records_nothing(
    store: PodStore, clock: Clock
) -> None:
    gpu(store, "p1", "G1")
    clock.set(100)
    assert store.record_ends([("p1", "main", "runtime", at(50))]) == 1
    assert store.record_ends([("p1", "main", "runtime", at(50))]) == 0  # seen again
    assert store.record_ends([("p1", None, "pod-logs", at(70))]) == 0  # later
    assert store.record_ends([("p1", "main", "cpu", at(50))]) == 0  # same time
    clock.set(200)
    store.delete(["p1"])
    assert intervals(store)[0][-2:] == (at(50), "runtime")
    assert len(end_events(store)) == 1


def test_earlier_evidence_arriving_later_wins_recorded_once(store: PodStore, clock: Clock) -> None:
    gpu(store, "p1", "G1")
    gpu(store, "p2", "G2")
    clock.set(100)
    store.record_ends([("p1", "main", "cpu", at(80))])
    store.delete(["p2"])
    # The runtime reports later, with earlier exits: for p1 before the recorded cpu end, for
    # p2 before the checkpoint's delete (kubelet dropped the entry at its next allocation).
    clock.set(150)
    assert (
        store.record_ends([("p1", "main", "runtime", at(60)), ("p2", "main", "runtime", at(40))])
        == 2
    )
    assert (
        store.record_ends([("p1", "main", "runtime", at(60)), ("p2", "main", "runtime", at(40))])
        == 0
    )
    assert [r[-2:] for r in intervals(store)] == [(at(60), "runtime"), (at(40), "runtime")]
    # After the delete a later evidence than the delete is no end of it.
    assert store.record_ends([("p2", None, "pod-logs", at(120))]) == 0
    assert len(end_events(store)) == 3


def test_all_sources_racing_the_earliest_wins(store: PodStore, clock: Clock) -> None:
    node = Node(1)
    p0 = pod_uid(0)
    cpu, memory = _cpu_and_memory(node, {0})
    store.set_pod_names({p0: PodName("ns", "a")})
    store.set_cpu_state(cpu)
    store.set_memory_state(memory)
    gpu(store, p0, "G0")
    clock.set(10)
    cpu, memory = _cpu_and_memory(node, set())
    store.set_memory_state(memory)  # memory at 10
    clock.set(20)
    store.set_cpu_state(cpu)  # cpu at 20: later, nothing recorded
    clock.set(30)
    store.set_pod_names({})  # pod-logs at 30: later still
    clock.set(40)
    store.delete([p0])  # checkpoint at 40
    assert store.record_ends([(p0, "main", "runtime", at(15))]) == 0
    assert intervals(store)[0][-2:] == (at(10), "memory")
    assert [e[3]["source"] for e in end_events(store)] == ["memory"]


def test_evidence_before_the_holding_began_ends_it_at_its_start(
    store: PodStore, clock: Clock
) -> None:
    clock.set(100)
    gpu(store, "p1", "G1")  # first seen at 100: the watch started after the container exited
    assert store.record_ends([("p1", "main", "runtime", at(60))]) == 1
    assert intervals(store)[0][-3:] == (at(100), at(100), "runtime")


def test_bad_evidence_is_refused_and_writes_nothing(store: PodStore, clock: Clock) -> None:
    gpu(store, "p1", "G1")
    before = len(store.history())
    for bad in (
        [("p1", "main", "checkpoint", at(5))],
        [("p1", "main", "runtime", at(5)), ("p1", "main", "bogus", at(6))],
        [("p1", "main", "runtime", "not a time")],
    ):
        with pytest.raises(InvalidInputError):
            store.record_ends(bad)
    assert len(store.history()) == before


def test_history_pruned_in_the_middle_keeps_intervals_whole(store: PodStore, clock: Clock) -> None:
    gpu(store, "gone", "G0")  # ends before the cut: pruned with its events
    gpu(store, "held", "G1")  # held across the cut
    gpu(store, "ended", "G2")  # its holder ended before the cut; the entry stays
    clock.set(10)
    store.insert("held", "main", GPU, {0: ["G1", "G3"]}, b"")  # the state at the cut
    clock.set(20)
    store.delete(["gone"])
    store.record_ends([("ended", "main", "runtime", at(15))])
    clock.set(50)
    gpu(store, "after", "G4")
    before = {r[3]: r for r in intervals(store)}
    assert store.prune_history(at(30)) > 0
    after = {r[3]: r for r in intervals(store)}
    assert "gone" not in after
    assert after["after"] == before["after"]
    # The end evidence of a holder whose entry stays is kept with the entry's kept event.
    assert after["ended"][-2:] == (at(15), "runtime")
    cut = {
        tuple(r)
        for r in store.query(
            "SELECT pod_uid, device, start, start_cut FROM v_allocation_intervals"
        ).rows
    }
    assert cut == {
        ("held", "G1", at(10), 1),  # began before the kept event: marked
        ("held", "G3", at(10), 1),
        ("ended", "G2", at(0), 0),  # its insert is the kept event: whole
        ("after", "G4", at(50), 0),
    }
    assert store.verify_history().ok


def _window(rows: list[tuple[str, str | None, float]], since: str, until: str) -> list[Any]:
    """usage_sql over a stand-in view of the given (start, end, share) intervals."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE v_allocation_intervals (namespace, resource, physical_id, pod_uid, "
        'pod_name, start, "end", share)'
    )
    conn.executemany(
        "INSERT INTO v_allocation_intervals VALUES ('ns', 'r', 'phys', 'p', 'n', ?, ?, ?)", rows
    )
    return [
        (round(s, 6), n)
        for _ns, s, n in conn.execute(
            usage_sql("namespace", False), {"since": since, "until": until, "resource": None}
        )
    ]


def test_usage_clips_to_the_window_counts_open_ones_to_until_and_applies_shares() -> None:
    rows: list[tuple[str, str | None, float]] = [
        (at(0), at(100), 1.0),  # clipped at both ends: 50 → 80 is 30 s
        (at(60), at(70), 1.0),  # inside: 10 s
        (at(70), None, 0.5),  # open, counted to until at half a share: 0.5 × 10
        (at(0), at(50), 1.0),  # ends where the window starts: out
        (at(80), at(200), 0.25),  # starts where the window ends: out
        (at(60.9996), at(70.9996), 1.0),  # fractions that SQLite's own parse rounds up: 10 s
    ]
    assert _window(rows, at(50), at(80)) == [(55.0, 4)]
    # Two replicas of one device, half each, over the whole day: one device-hour per hour.
    replicas = [(at(0), None, 0.5), (at(0), None, 0.5)]
    assert _window(replicas, at(0), at(3600)) == [(3600.0, 2)]


def test_the_cookbook_overstatement_query(store: PodStore, clock: Clock) -> None:
    """docs/audit.md question 17 on a store where the runtime ended a holding early."""
    from harness.docblocks import DOCS, sql_blocks

    (sql,) = [q for h, q in sql_blocks(DOCS / "audit.md") if h.startswith("17.")]
    gpu(store, "p1", "G1")
    gpu(store, "p2", "G2")
    clock.set(100)
    store.record_ends([("p1", "main", "runtime", at(40))])
    clock.set(400)
    store.delete(["p1", "p2"])
    assert store.query(sql).rows == [("runtime", 1, 0.1)]  # 360 s


def test_the_device_seconds_counter_adds_up_the_intervals(store: PodStore, clock: Clock) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from podstore.metrics.collector import registry_for
    from podstore.metrics.exposition import render

    store.set_pod_names({"p1": PodName("team-a", "x"), "p2": PodName("team-b", "y")})
    gpu(store, "p1", "G1")
    gpu(store, "p2", "G2")
    clock.set(100)
    store.record_ends([("p1", "main", "runtime", at(30))])
    clock.set(200)
    store.delete(["p2"])
    (family,) = [
        f
        for f in text_string_to_metric_families(render(registry_for(store)).decode())
        if f.name == "podstore_device_seconds"
    ]
    assert family.type == "counter"
    got = {(s.labels["resource"], s.labels["namespace"]): s.value for s in family.samples
           if s.name == "podstore_device_seconds_total"}  # fmt: skip
    assert got == {(GPU, "team-a"): 30.0, (GPU, "team-b"): 200.0}


def test_the_device_seconds_reading_is_reused_for_a_while(store: PodStore, clock: Clock) -> None:
    """A scrape within DEVICE_SECONDS_EVERY of the last reading reuses it (a reading covers
    the whole history); after it, the counter has moved on."""
    from podstore.metrics.collector import DEVICE_SECONDS_EVERY, StoreCollector

    ticks = [1000.0]
    collector = StoreCollector(store, clock=lambda: ticks[0])

    def reading() -> float:
        (family,) = [m for m in collector.collect() if m.name == "podstore_device_seconds"]
        return float(sum(s.value for s in family.samples if s.name.endswith("_total")))

    gpu(store, "p1", "G1")
    first = reading()  # held: counted up to now
    clock.set(10)
    store.delete(["p1"])
    assert reading() == first  # reused
    ticks[0] += DEVICE_SECONDS_EVERY
    assert reading() == 10.0  # read again: held from 0 to the delete at 10 s


def test_usage_refuses_bad_windows_and_changes_nothing(tmp_path: Path) -> None:
    from harness.cli import podstore

    db = tmp_path / "s.db"
    with PodStore.open(db) as s:
        s.insert("p1", "main", GPU, {0: ["G1"]}, b"")
    before = db.read_bytes()
    for args in (
        ["--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"],
        ["--since", "yesterday"],
        ["--by", "colour"],
    ):
        run = podstore("--db", str(db), "usage", *args, cwd=tmp_path)
        assert run.returncode == 2, (args, run.stderr)
        assert run.stdout == ""
    assert db.read_bytes() == before
    missing = podstore("--db", str(tmp_path / "none.db"), "usage", cwd=tmp_path)
    assert missing.returncode == 1 and not (tmp_path / "none.db").exists()


def test_intervals_bill_the_physical_device_replicas_as_shares(
    store: PodStore, clock: Clock
) -> None:
    """v_allocation_intervals takes v_device_identity's physical id, and a replica's share
    from the registration in force when its holding began: two pods on replicas of one
    time-sliced card (four registered) for an hour are a quarter card-hour each, and stay so
    when the plugin registers two; a whole card named by its host path is that path's card
    while held. Once its entry is gone nothing on the node names its path any more, and a
    finished holding of an unregistered device is its own unresolved id (docs/sql.md)."""
    from podstore import ContainerAllocateResponse, DeviceSpec

    shared = "nvidia.com/gpu.shared"
    store.set_registered_devices({shared: [f"GPU-6::{r}" for r in range(4)]})
    resp = ContainerAllocateResponse()
    resp.devices.append(DeviceSpec(container_path="/dev/nvidia0", host_path="/dev/nvidia0"))
    store.insert("p1", "main", GPU, {0: ["GPU-0"]}, resp.SerializeToString())
    store.insert("p2", "main", shared, {0: ["GPU-6::0"]}, b"")
    store.insert("p3", "main", shared, {0: ["GPU-6::3"]}, b"")
    clock.set(3600)
    query = "SELECT pod_uid, physical_id, share FROM v_allocation_intervals ORDER BY pod_uid"
    unresolved = f"device-plugin:{shared}:GPU-6"
    assert [tuple(r) for r in store.query(query).rows] == [
        ("p1", '["/dev/nvidia0"]', 1.0),
        ("p2", unresolved, 0.25),
        ("p3", unresolved, 0.25),
    ]
    window = {"since": at(0), "until": at(3600)}
    by = {r[0]: r[1] for r in store.query(usage_sql("physical", False), window).rows}
    assert by == {'["/dev/nvidia0"]': 3600.0, unresolved: 1800.0}
    store.set_registered_devices({shared: [f"GPU-6::{r}" for r in (0, 3)]})
    assert [tuple(r) for r in store.query(query).rows][1:] == [
        ("p2", unresolved, 0.25),
        ("p3", unresolved, 0.25),
    ]
    store.delete(["p1", "p2", "p3"])
    rows = [tuple(r) for r in store.query(query).rows]
    assert rows[0] == ("p1", f"device-plugin:{GPU}:GPU-0", 1.0)
    assert rows[1:] == [("p2", unresolved, 0.25), ("p3", unresolved, 0.25)]


def _counter(store: PodStore, until: str) -> dict[tuple[str, str], float]:
    from podstore.storage.sql.intervals import DEVICE_SECONDS

    rows = store.query(DEVICE_SECONDS, {"until": until}).rows
    return {(r, ns): round(float(s), 6) for r, ns, s in rows}


def test_pruning_the_history_never_lowers_the_device_seconds_counter(
    store: PodStore, clock: Clock
) -> None:
    """A prune takes intervals (and the start of a holding across the cut) off the history;
    what they held is carried, so the counter at any later time is what it would have been
    (Prometheus would read a fall as a reset and count the whole counter again)."""
    store.set_pod_names({"gone": PodName("team-a", "g"), "held": PodName("team-b", "h")})
    gpu(store, "gone", "G0")
    gpu(store, "held", "G1")
    gpu(store, "nameless", "G2")
    clock.set(10)
    store.insert("held", "main", GPU, {0: ["G1", "G3"]}, b"")
    clock.set(20)
    store.delete(["gone", "nameless"])
    clock.set(50)
    gpu(store, "after", "G4")
    later = at(10_000)
    before = _counter(store, later)
    assert before == {(GPU, "team-a"): 20.0, (GPU, "team-b"): 10_000.0 + 9_990.0,
                      (GPU, ""): 20.0 + 9_950.0}  # fmt: skip
    assert store.prune_history(at(30)) > 0
    # The history lost `gone` and `nameless` and ten seconds of `held`'s G1 ...
    lost = store.query(
        "SELECT count(*) FROM v_allocation_intervals WHERE pod_uid IN ('gone', 'nameless')"
    ).rows
    assert lost == [(0,)]
    # ... and the counter did not.
    assert _counter(store, later) == before
    assert _counter(store, at(20_000)) == {
        (GPU, "team-a"): 20.0, (GPU, "team-b"): 20_000.0 + 19_990.0,
        (GPU, ""): 20.0 + 19_950.0,
    }  # fmt: skip
    assert store.prune_history(at(30)) == 0
    assert _counter(store, later) == before


def test_a_prune_that_takes_a_pods_name_keeps_each_namespaces_counter(
    store: PodStore, clock: Clock
) -> None:
    """The pod's name went before the cut and its holding came after: the prune takes the
    name's events, the holding's seconds leave its namespace for "" in the history, and the
    counter of each label stays where it was."""
    store.set_pod_names({"p": PodName("team-a", "x")})
    clock.set(5)
    store.set_pod_names({})
    clock.set(40)
    gpu(store, "p", "G1")
    clock.set(60)
    store.delete(["p"])
    later = at(10_000)
    before = _counter(store, later)
    assert before == {(GPU, "team-a"): 20.0}
    assert store.prune_history(at(30)) > 0
    renamed = store.query("SELECT namespace FROM v_allocation_intervals").rows
    assert renamed == [(None,)]
    assert _counter(store, later) == {(GPU, "team-a"): 20.0, (GPU, ""): 0.0}
