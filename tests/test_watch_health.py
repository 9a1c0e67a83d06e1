"""``GET /healthz`` and ``GET /readyz`` of ``podstore watch --metrics-addr``: served beside
``/metrics`` by the same server, answered from the follower's pulse (never the store), 503
with a short JSON body when the follower is stuck or not ready.

Real ``podstore watch`` subprocesses on real stores for the fault paths a probe must see (a
store locked past ``--stuck-after``, a sync stuck behind a lock) and a follower in a thread
for the ones a test must cause from inside (a loop that stops coming round, a follower
whose thread died). The timing test builds a 100,000-entry store (about 15 s).
"""

from __future__ import annotations

import json
import random
import re
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.figures import report
from harness.scale_store import build
from harness.watch_support import (
    WatchProcess,
    WriteLock,
    checkpoint_path,
    mutate,
    random_state,
    wait_for,
)

from podstore import PodStore
from podstore.watch.follower import Follower
from podstore.watch.health import STUCK_AFTER, Health, Pulse

_SERVING = r"serving metrics on http://([0-9.]+):(\d+)/metrics"


def http(url: str, method: str = "GET", timeout: float = 30.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def answer(base: str, path: str) -> tuple[int, dict[str, Any]]:
    status, body = http(base + path)
    return status, json.loads(body)


@pytest.fixture
def watches() -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for w in started:
        w.kill()


def start(
    watches: list[WatchProcess], db: Path, cp: Path, *args: str, log: Path
) -> tuple[WatchProcess, str]:
    w = WatchProcess(db, cp, "--metrics-addr", "127.0.0.1:0", *args, log=log)
    watches.append(w)
    found = w.wait_log(_SERVING, timeout=60)
    return w, f"http://{found[1]}:{found[2]}"


# ---- a running follower ------------------------------------------------------------------------


def test_a_following_watch_is_live_and_ready_and_says_so_in_json(
    tmp_path: Path, watches: list[WatchProcess]
) -> None:
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(3), 5).write(cp)
    w, base = start(watches, tmp_path / "s.db", cp, "--interval", "1", log=tmp_path / "w.log")
    wait_for(lambda: answer(base, "/readyz")[0] == 200, 30, step=0.05)
    status, body = answer(base, "/readyz")
    assert body == {"status": "ready", "problems": []}
    status, body = answer(base, "/healthz")
    assert status == 200, body
    assert body["status"] == "ok" and body["problems"] == []
    (follower,) = body["followers"]
    assert follower["checkpoint"] == str(cp)
    assert follower["last_result"] == "applied" and follower["alive"] is True
    assert 0 <= follower["last_good_sync_age_seconds"] < 60
    # The same server still serves the metrics on /metrics and on no other path (a mistyped
    # scrape path fails rather than looking right), a HEAD of a health path has no body, and
    # nothing but GET and HEAD is taken there.
    status, metrics = http(base + "/metrics")
    assert status == 200 and b"podstore_checkpoint_syncs_total" in metrics
    for other in ("/", "/metric", "/metrics/", "/healthz/x", "/favicon.ico"):
        status, body = http(base + other)
        assert status == 404 and b"podstore_" not in body, other
    assert http(base + "/healthz", "HEAD") == (200, b"")
    assert http(base + "/healthz", "POST")[0] == 405
    assert w.stop() == 0, w.log()


def test_stuck_after_defaults_agree() -> None:
    """The command's documented default and the module's are the same 5 minutes."""
    from harness.cli import subcommand

    from podstore.cli import cli

    (option,) = [p for p in subcommand(cli, "watch").params if p.name == "stuck_after"]
    assert option.default == "5m" and STUCK_AFTER == 300.0


# ---- a stuck follower turns /healthz 503, and it comes back -----------------------------------


@pytest.mark.parametrize(
    ("busy_timeout", "problem"),
    [
        # Each sync fails busy after 0.2 s and is retried: store errors past --stuck-after.
        ("0.2", "store errors for"),
        # One sync waits on the lock for a minute: a sync running past --stuck-after.
        ("60", "a sync has run for"),
    ],
)
def test_a_store_locked_past_stuck_after_turns_healthz_503_until_it_is_released(
    tmp_path: Path, watches: list[WatchProcess], busy_timeout: str, problem: str
) -> None:
    rng = random.Random(11)
    cp = checkpoint_path(tmp_path)
    state = random_state(rng, 6)
    state.write(cp)
    db = tmp_path / "s.db"
    w, base = start(
        watches, db, cp, "--interval", "1", "--busy-timeout", busy_timeout,
        "--stuck-after", "2s", log=tmp_path / "w.log",
    )  # fmt: skip
    wait_for(lambda: answer(base, "/healthz")[1]["followers"][0]["last_result"] == "applied", 30)
    with WriteLock(db) as lock:
        mutate(rng, state, 2).write(cp)
        started = time.monotonic()
        wait_for(lambda: answer(base, "/healthz")[0] == 503, 30, step=0.1)
        waited = time.monotonic() - started
        status, body = answer(base, "/healthz")
        assert status == 503 and body["status"] == "unhealthy", body
        assert any(problem in p for p in body["problems"]), body
        assert waited >= 2.0  # not before --stuck-after
        # The probe stays quick while the follower is stuck, and the metrics still answer.
        t = time.perf_counter()
        http(base + "/healthz")
        assert time.perf_counter() - t < 2.0
        assert http(base + "/metrics")[0] == 200
        lock.release()
    wait_for(lambda: answer(base, "/healthz")[0] == 200, 90, step=0.1)
    assert answer(base, "/readyz")[0] == 200
    assert w.stop() == 0, w.log()


class _Gate:
    """An after-sync hook that blocks the follower's loop until opened."""

    def __init__(self) -> None:
        self.closed = False
        self.opened = threading.Event()

    def __call__(self, _outcome: object) -> None:
        if self.closed:
            self.opened.wait(60)


def _follow(follower: Follower) -> threading.Thread:
    thread = threading.Thread(target=follower.run, name="follower", daemon=True)
    thread.start()
    return thread


def test_a_loop_that_stops_coming_round_turns_healthz_503(tmp_path: Path) -> None:
    """An after-sync step that hangs (a textfile on a dead mount, say) keeps the loop from
    coming round; /healthz says so once interval + stuck_after have passed."""
    rng = random.Random(5)
    cp = checkpoint_path(tmp_path)
    state = random_state(rng, 4)
    state.write(cp)
    with PodStore.open(tmp_path / "s.db") as store:
        gate = _Gate()
        follower = Follower(store, str(cp), interval=0.2, on_sync=[gate])
        health = Health(stuck_after=1.0)
        health.watch(str(cp), follower.pulse, follower.interval)
        thread = _follow(follower)
        wait_for(lambda: follower.pulse.last_result == "applied", 30)
        assert health.live().status == 200
        gate.closed = True
        mutate(rng, state, 2).write(cp)
        wait_for(lambda: health.live().status == 503, 30, step=0.05)
        assert any("loop has not come round" in p for p in health.live().body["problems"])
        gate.opened.set()
        wait_for(lambda: health.live().status == 200, 30, step=0.05)
        follower.stop()
        thread.join(30)


def test_a_follower_whose_thread_died_turns_healthz_503(tmp_path: Path) -> None:
    """A bug that escapes the follower's loop ends its thread: /healthz says the follower
    stopped (while the watch has not asked it to)."""
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(6), 3).write(cp)

    def bug(_outcome: object) -> None:
        raise RuntimeError("a bug in an after-sync hook")

    with PodStore.open(tmp_path / "s.db") as store:
        follower = Follower(store, str(cp), interval=0.2, on_sync=[bug])
        health = Health(stuck_after=60)
        health.watch(str(cp), follower.pulse, follower.interval)
        died = threading.Event()
        previous = threading.excepthook
        threading.excepthook = lambda _args: died.set()
        try:
            thread = _follow(follower)
            thread.join(30)
        finally:
            threading.excepthook = previous
        assert died.is_set() and not thread.is_alive()
        live = health.live()
        assert live.status == 503, live.body
        assert live.body["problems"] == [f"{cp}: the follower stopped"]
        assert live.body["followers"][0]["alive"] is False
        # A stop the watch asked for is not a failure.
        health.stopping = True
        assert health.live().status == 200
        assert health.ready().status == 503


@pytest.mark.parametrize(
    ("results", "ready"),
    [
        ([], False),  # no first sync yet
        (["error"], False),  # the store did not answer
        (["error", "missing"], True),  # a node without device plugins is ready
        (["invalid"], True),
        (["applied"], True),
    ],
)
def test_readyz_waits_for_a_first_sync_the_store_answered(results: list[str], ready: bool) -> None:
    pulse = Pulse()
    health = Health()
    health.watch("cp", pulse, 10.0)
    for result in results:
        pulse.sync_started()
        pulse.sync_ended(result)
    got = health.ready()
    assert (got.status == 200) is ready, got.body
    assert got.body["status"] == ("ready" if ready else "not ready")


def test_store_errors_count_from_the_first_of_them() -> None:
    now = [1000.0]
    pulse = Pulse(clock=lambda: now[0])
    health = Health(stuck_after=10)
    health.watch("cp", pulse, 1.0)
    pulse.sync_started()
    pulse.sync_ended("applied")
    # An idle node: its last good sync an hour old, then one failed sync is no stuck store.
    now[0] += 3600
    pulse.sync_started()
    pulse.sync_ended("error")
    assert health.live().status == 200
    for _ in range(9):  # errors for 9 s: still live
        now[0] += 1
        pulse.sync_started()
        pulse.sync_ended("error")
    assert health.live().status == 200
    now[0] += 2
    pulse.sync_started()
    pulse.sync_ended("error")
    assert health.live().status == 503
    assert health.live().body["problems"] == ["cp: store errors for 11 s"]
    pulse.sync_started()
    pulse.sync_ended("unchanged")
    assert health.live().status == 200
    # A new run of errors counts from its own start.
    now[0] += 5
    pulse.sync_started()
    pulse.sync_ended("error")
    assert health.live().status == 200
    # Bad files are not a liveness problem, however long they last.
    now[0] += 3600
    pulse.sync_started()
    pulse.sync_ended("invalid")
    assert health.live().status == 200


# ---- cheap at scale ----------------------------------------------------------------------------


@pytest.mark.slow
def test_healthz_stays_quick_at_100000_entries_while_metrics_reads_the_store(
    tmp_path: Path, watches: list[WatchProcess]
) -> None:
    db = build(tmp_path / "big.db", 100_000)
    # No checkpoint on this "node": the follower's sync is quick (missing), the store big.
    cp = checkpoint_path(tmp_path)
    w, base = start(watches, db, cp, "--interval", "10", log=tmp_path / "w.log")
    wait_for(lambda: answer(base, "/readyz")[0] == 200, 60, step=0.05)

    def timed(path: str) -> float:
        t = time.perf_counter()
        status, _ = http(base + path, timeout=120)
        assert status == 200, path
        return time.perf_counter() - t

    metrics = [timed("/metrics") for _ in range(3)]
    alone = [timed("/healthz") for _ in range(30)]
    # And while a scrape is reading the store.
    during: list[float] = []
    scrape = threading.Thread(target=lambda: during.append(timed("/metrics")))
    scrape.start()
    time.sleep(0.05)
    beside = [timed("/healthz") for _ in range(10)]
    scrape.join(120)
    assert w.stop() == 0, w.log()
    figures = {
        "metrics_p50_s": statistics.median(metrics),
        "healthz_p50_ms": statistics.median(alone) * 1000,
        "healthz_max_ms": max(alone) * 1000,
        "healthz_during_scrape_p50_ms": statistics.median(beside) * 1000,
    }
    report("healthz at 100,000 entries", **figures)
    # A probe's answer is milliseconds: far below the scrape (over a second here), and well
    # inside a probe's one-second default timeout even beside a scrape on a loaded machine.
    assert statistics.median(alone) < 0.1, figures
    assert statistics.median(beside) < 0.25, figures
    assert statistics.median(alone) * 10 < statistics.median(metrics), figures


def test_the_serving_line_names_the_health_paths(
    tmp_path: Path, watches: list[WatchProcess]
) -> None:
    cp = checkpoint_path(tmp_path)
    w, _base = start(watches, tmp_path / "s.db", cp, log=tmp_path / "w.log")
    assert re.search(_SERVING + r" \(and /healthz, /readyz\)", w.log())
    assert w.stop() == 0
