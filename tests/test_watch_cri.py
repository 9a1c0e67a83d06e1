"""``podstore watch --cri-socket``: the runtime's exit times end allocations, through a real
gRPC client talking to the tests' own CRI server over a unix socket (tests/harness/criserver.py);
a restarted watch records nothing twice; a runtime that does not answer is logged and counted
and the watch goes on."""

from __future__ import annotations

import socket as sock
import sqlite3
import time
from pathlib import Path

import pytest
from harness.cli import podstore
from harness.criserver import CriServer, FakeContainer
from prometheus_client.parser import text_string_to_metric_families

from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint
from podstore.watch.cri import CriEvidence, finished_time

GPU = "nvidia.com/gpu"


def _checkpoint(path: Path, pods: list[str]) -> Path:
    entries = [PodDevicesEntry(p, "main", GPU, {0: [f"G-{p}"]}, b"") for p in pods]
    path.write_bytes(dumps_checkpoint(entries, {GPU: [f"G-{p}" for p in pods]}))
    return path


def _intervals(db: Path) -> dict[str, tuple[str | None, str | None]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute('SELECT pod_uid, "end", end_source FROM v_allocation_intervals')
        return {r[0]: (r[1], r[2]) for r in rows}


def _end_events(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM allocation_events WHERE op = 'end'"
        ).fetchone()
        return int(count)


def _metrics(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            if s.name.startswith("podstore_cri_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _watch_once(tmp_path: Path, socket: Path) -> tuple[int, str, Metrics]:
    prom = tmp_path / "m.prom"
    run = podstore(
        "--db", "s.db", "watch", "ckpt", "--once", "--cri-socket", str(socket),
        "--textfile", str(prom), cwd=tmp_path,
    )  # fmt: skip
    return run.returncode, run.stderr, _metrics(prom)


def test_exits_end_allocations_once_and_a_restart_records_nothing_twice(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "ckpt", ["pod-a", "pod-b", "pod-c"])
    socket = tmp_path / "cri.sock"
    # After the entries are first seen (the exit time is the runtime's, not the test's clock).
    exit_a = time.time_ns() + 3_600_123_456_789
    with CriServer(socket) as cri:
        cri.containers = [
            FakeContainer("a0", "pod-a", "main", finished_at=exit_a),
            # pod-b's main exited, then kubelet restarted it: still held.
            FakeContainer("b0", "pod-b", "main", attempt=0, finished_at=exit_a, created_at=1),
            FakeContainer("b1", "pod-b", "main", attempt=1, running=True, created_at=2),
            FakeContainer("c0", "pod-c", "main", running=True),
            FakeContainer("x0", "not-a-pod-here", "main", finished_at=exit_a),
        ]
        code, err, metrics = _watch_once(tmp_path, socket)
        assert code == 0, err
        db = tmp_path / "s.db"
        assert _intervals(db) == {
            "pod-a": (finished_time(exit_a), "runtime"),
            "pod-b": (None, None),
            "pod-c": (None, None),
        }
        assert metrics[("podstore_cri_up", ())] == 1
        assert metrics[("podstore_cri_polls_total", (("result", "ok"),))] == 1
        assert metrics[("podstore_cri_ends_total", ())] == 1

        # A restarted watch asks the runtime again and finds every exit recorded.
        code, err, metrics = _watch_once(tmp_path, socket)
        assert code == 0, err
        assert _end_events(db) == 1
        assert metrics[("podstore_cri_ends_total", ())] == 0

        exit_c = exit_a + 5_000_000_000
        cri.containers[3] = FakeContainer("c0", "pod-c", "main", finished_at=exit_c)
        assert _watch_once(tmp_path, socket)[0] == 0
        assert _intervals(db)["pod-c"] == (finished_time(exit_c), "runtime")
        assert _end_events(db) == 2


@pytest.mark.parametrize("how", ["missing", "not-listening"])
def test_an_unreachable_runtime_is_reported_and_the_watch_goes_on(tmp_path: Path, how: str) -> None:
    _checkpoint(tmp_path / "ckpt", ["pod-a"])
    socket = tmp_path / "cri.sock"
    bound = None
    if how == "not-listening":  # a socket file that nobody answers on: UNAVAILABLE
        bound = sock.socket(sock.AF_UNIX, sock.SOCK_STREAM)
        bound.bind(str(socket))
    try:
        code, err, metrics = _watch_once(tmp_path, socket)
    finally:
        if bound is not None:
            bound.close()
    assert code == 0, err
    assert str(socket) in err and "runtime end evidence waits" in err
    assert metrics[("podstore_cri_up", ())] == 0
    assert metrics[("podstore_cri_polls_total", (("result", "unreachable"),))] == 1
    assert metrics[("podstore_cri_polls_total", (("result", "ok"),))] == 0
    # The sync itself went through: the entry is held.
    assert _intervals(tmp_path / "s.db") == {"pod-a": (None, None)}


def test_a_following_watch_asks_for_each_exit_once(tmp_path: Path) -> None:
    """Between polls of one process the runtime is asked for each exited container once."""
    socket = tmp_path / "cri.sock"
    with PodStore.open(tmp_path / "s.db") as store, CriServer(socket) as cri:
        store.insert("pod-a", "main", GPU, {0: ["G1"]}, b"")
        exit_a = time.time_ns() + 3_600_000_000_000
        cri.containers = [
            FakeContainer("a0", "pod-a", "main", finished_at=exit_a),
            FakeContainer("z0", "pod-z", "main", finished_at=exit_a),
        ]
        follower = CriEvidence(store, str(socket))
        try:
            assert follower.poll() == 1
            assert follower.poll() == 0
        finally:
            follower.close()
        assert cri.status_calls == 2
        assert follower.polls == {"ok": 2, "unreachable": 0, "error": 0}


def test_a_failed_recording_is_counted_and_the_exit_is_asked_again(tmp_path: Path) -> None:
    """The runtime answered but the store could not take the evidence (another writer held it
    past the busy timeout): the poll is counted as an error, nothing is written, and the
    exit is asked for again and recorded at the next poll."""
    socket = tmp_path / "cri.sock"
    db = tmp_path / "s.db"
    with PodStore.open(db, busy_timeout=0.2) as store, CriServer(socket) as cri:
        store.insert("pod-a", "main", GPU, {0: ["G1"]}, b"")
        cri.containers = [FakeContainer("a0", "pod-a", "main", finished_at=time.time_ns())]
        follower = CriEvidence(store, str(socket))
        blocker = sqlite3.connect(db, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            assert follower.poll() == 0
            assert follower.polls == {"ok": 0, "unreachable": 0, "error": 1}
            blocker.execute("ROLLBACK")
            assert _end_events(db) == 0
            assert follower.poll() == 1
            assert follower.polls == {"ok": 1, "unreachable": 0, "error": 1}
        finally:
            blocker.close()
            follower.close()
        assert cri.status_calls == 2  # asked again after the failed recording
    assert _intervals(db)["pod-a"][1] == "runtime"
