"""The after-sync hook (what ``--ship-to`` runs): capped exponential backoff, coalesced
requests, errors logged once with URLs masked, and local syncs never blocked — tested with real
hook functions of our own and a real follower on a real store."""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path

import pytest
from harness.watch_support import (
    checkpoint_path,
    file_state,
    mutate,
    random_state,
    store_state,
    wait_for,
)

from podstore import PodStore, PodStoreError
from podstore.metrics.stats import BUCKETS, SyncStats
from podstore.pure.secrets import mask_url, scrub, url_password
from podstore.watch.follower import Follower
from podstore.watch.shipping import RetryingHook


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://ps:s3cret@db:5432/fleet", "postgresql://ps:***@db:5432/fleet"),
        ("postgresql+psycopg://ps@db/fleet", "postgresql+psycopg://ps@db/fleet"),
        ("postgresql://u:p%40ss@[::1]:5432/f", "postgresql://u:***@[::1]:5432/f"),
        (
            "postgresql://ps@/fleet?host=/run/postgresql",
            "postgresql://ps@/fleet?host=/run/postgresql",
        ),
        ("postgresql:///f?user=u&password=pw", "postgresql:///f?user=u&password=***"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_scrub_removes_the_password_wherever_it_appears() -> None:
    url = "postgresql://ps:s3cret@db:5432/fleet"
    text = f'connection to {url} failed: password "s3cret" rejected'
    out = scrub(text, url_password(url))
    assert "s3cret" not in out and "postgresql://ps:***@db:5432/fleet" in out


class Flaky:
    """A hook that fails ``failures`` times (PodStoreError, as ship does when the server is
    down), then succeeds; it records when it was called."""

    def __init__(self, failures: int, message: str = "connection refused") -> None:
        self.left = failures
        self.message = message
        self.times: list[float] = []
        self.done = threading.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        if self.left > 0:
            self.left -= 1
            raise PodStoreError(self.message)
        self.done.set()


def test_failures_back_off_exponentially_up_to_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    hook = Flaky(5)
    runner = RetryingHook(hook, name="ship", first_delay=0.02, max_delay=0.08)
    caplog.set_level(logging.INFO, logger="podstore")
    runner.start()
    runner.notify()
    assert hook.done.wait(10)
    runner.stop()
    assert runner.delays == [0.02, 0.04, 0.08, 0.08, 0.08]
    gaps = [b - a for a, b in zip(hook.times, hook.times[1:], strict=False)]
    assert all(gap >= delay * 0.9 for gap, delay in zip(gaps, runner.delays, strict=True))
    assert (runner.calls, runner.failures, runner.successes) == (6, 5, 1)
    errors = [r for r in caplog.records if "ship failed" in r.getMessage()]
    assert len(errors) == 1  # the same problem five times: logged once
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_a_success_resets_the_backoff_and_a_new_problem_is_logged() -> None:
    messages = iter(["refused", "refused", "timeout"])
    calls: list[float] = []
    fail = threading.Event()
    fail.set()

    def hook() -> None:
        calls.append(time.monotonic())
        if fail.is_set():
            raise PodStoreError(next(messages, "timeout"))

    runner = RetryingHook(hook, first_delay=0.01, max_delay=0.04)
    runner.start()
    runner.notify()
    wait_for(lambda: runner.failures >= 3, 5)
    fail.clear()
    wait_for(lambda: runner.successes == 1, 5)
    fail.set()
    failures_before = runner.failures
    runner.notify()
    wait_for(lambda: runner.failures > failures_before, 5)
    fail.clear()
    wait_for(lambda: runner.successes == 2, 5)
    runner.stop()
    # After the success the first retry waited the first delay again.
    assert runner.delays[failures_before] == 0.01


def test_requests_during_a_call_collapse_into_one_more_call() -> None:
    release = threading.Event()
    entered = threading.Event()
    calls = []

    def hook() -> None:
        calls.append(1)
        entered.set()
        release.wait(10)

    runner = RetryingHook(hook, first_delay=0.01, max_delay=0.01)
    runner.start()
    runner.notify()
    assert entered.wait(5)
    for _ in range(20):
        runner.notify()
    release.set()
    wait_for(lambda: len(calls) == 2, 5)
    time.sleep(0.05)
    runner.stop()
    assert len(calls) == 2


def test_a_hook_raising_anything_keeps_its_thread_alive() -> None:
    seen = []

    def hook() -> None:
        seen.append(1)
        if len(seen) == 1:
            raise RuntimeError("a bug in the hook")

    runner = RetryingHook(hook, first_delay=0.01, max_delay=0.01)
    runner.start()
    runner.notify()
    wait_for(lambda: runner.successes == 1, 5)
    runner.stop()


def test_a_stuck_hook_never_blocks_or_skips_local_syncs(tmp_path: Path) -> None:
    """The follower applies every rewrite while the hook hangs (a server that never answers),
    then a failing hook backs off while syncs go on."""
    cp = checkpoint_path(tmp_path)
    rng = random.Random(31)
    state = random_state(rng, 10)
    state.write(cp)
    release = threading.Event()
    hangs = {"calls": 0}

    def ship() -> None:
        hangs["calls"] += 1
        if not release.wait(30):
            raise PodStoreError("never answered")
        raise PodStoreError("connection refused")

    runner = RetryingHook(ship, first_delay=0.05, max_delay=0.2)
    with PodStore.open(tmp_path / "store.db") as store:
        follower = Follower(store, str(cp), interval=3600)
        follower.on_sync.append(lambda outcome: runner.notify() if outcome.ok else None)
        runner.start()
        thread = threading.Thread(target=follower.run, kwargs={"on_start": runner.notify})
        thread.start()
        try:
            with PodStore.open(tmp_path / "store.db", readonly=True, verify="off") as reader:
                wait_for(lambda: store_state(reader) == file_state(state), 10)
                wait_for(lambda: hangs["calls"] == 1, 5)
                for _ in range(10):  # the hook is stuck in its first call all along
                    state = mutate(rng, state)
                    state.write(cp)
                    want = file_state(state)
                    wait_for(lambda w=want: store_state(reader) == w, 5)
                assert hangs["calls"] == 1
                release.set()
                wait_for(lambda: runner.failures >= 3, 5)
                for _ in range(5):  # and while it backs off
                    state = mutate(rng, state)
                    state.write(cp)
                    want = file_state(state)
                    wait_for(lambda w=want: store_state(reader) == w, 5)
        finally:
            follower.stop()
            thread.join(10)
            runner.stop()
        assert not thread.is_alive()
        assert follower.stats.snapshot().syncs["applied"] >= 16


def test_sync_stats_histogram_buckets() -> None:
    stats = SyncStats()
    stats.record("applied", 0.001)  # on a bound: counts in that bucket (le)
    stats.record("unchanged", 0.3, at=1234.5)
    stats.record("invalid", 99.0)
    snap = stats.snapshot()
    assert snap.syncs == {"applied": 1, "unchanged": 1, "invalid": 1, "missing": 0, "error": 0}
    assert snap.last_good_sync == 1234.5
    assert snap.bucket_counts[0] == 1 and snap.bucket_counts[BUCKETS.index(0.5)] == 1
    assert snap.bucket_counts[-1] == 1 and snap.duration_count == 3
    with pytest.raises(ValueError):
        stats.record("weird", 0.1)
