"""Retention on the node: ``podstore prune --before|--keep`` and ``podstore watch
--keep-history`` (its pruner: at most once per period, held at the oldest event a fleet lacks),
on real stores; the command against its API call on a 20,000-entry store.

The fleet side (a real PostgreSQL that goes down: nothing unshipped is pruned) is
tests/fleet/test_fleet_watch_retention.py.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path

import pytest
from harness import scale_store as ss
from harness.cli import podstore
from harness.figures import report
from harness.watch_support import (
    WatchProcess,
    checkpoint_path,
    mutate,
    random_state,
)

from podstore import PodStore
from podstore.watch.retention import Pruner


def seqs(store: PodStore) -> list[int]:
    return [int(r[0]) for r in store.query("SELECT seq FROM allocation_events ORDER BY seq").rows]


def busy_history(store: PodStore, pods: int = 10, rounds: int = 4) -> None:
    """``rounds`` events per entry, each its own transaction (so each its own time)."""
    for r in range(rounds):
        for p in range(pods):
            store.insert(f"pod-{p}", "main", "example.com/gpu", {0: [f"gpu-{p}-{r}"]}, None)


# ---- the pruner --------------------------------------------------------------------------------


def test_pruner_cuts_at_now_minus_keep(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        busy_history(store)
        before = seqs(store)
        # An hour from now, keeping half an hour: everything is older than the cut.
        pruner = Pruner(store, 1800, clock=lambda: time.time() + 3600)
        removed = pruner.prune()
        after = seqs(store)
        # Each entry keeps the event carrying its state at the cut (its newest).
        assert removed == len(before) - len(after) == 30
        assert len(after) == 10
        assert store.verify_history().ok
        # Keeping a day: nothing is that old.
        assert Pruner(store, 86400).prune() == 0


@pytest.mark.parametrize("held_at", [0, 7, 23, 39])
def test_pruner_never_passes_the_oldest_event_the_fleet_lacks(tmp_path: Path, held_at: int) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        busy_history(store)
        before = seqs(store)
        pruner = Pruner(store, 0, clock=lambda: time.time() + 3600, shipped=lambda: held_at)
        pruner.prune()
        after = seqs(store)
        # Every event after the fleet's last seq is still here.
        assert [s for s in before if s > held_at] == [s for s in after if s > held_at]
        if held_at >= 20:  # two rounds shipped: the first round's events are gone
            assert set(range(1, 11)).isdisjoint(after)
        assert store.verify_history().ok


def test_pruner_prunes_nothing_while_the_fleet_has_confirmed_nothing(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        busy_history(store)
        before = seqs(store)
        pruner = Pruner(store, 0, clock=lambda: time.time() + 3600, shipped=lambda: None)
        assert pruner.cut() is None
        assert pruner.prune() is None
        pruner.maybe()
        assert pruner.last_run is None  # tried again at the next sync or tick
        assert seqs(store) == before


def test_pruner_runs_at_most_once_per_period(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        busy_history(store, pods=2, rounds=2)
        pruner = Pruner(store, 0, every=0.5, clock=lambda: time.time() + 3600)
        pruner.maybe()
        first = pruner.last_run
        assert first is not None and pruner.pruned == 2
        busy_history(store, pods=2, rounds=2)
        pruner.maybe()  # not due: nothing happens
        assert pruner.last_run == first and pruner.pruned == 2
        time.sleep(0.6)
        pruner.maybe()
        assert pruner.last_run is not None and pruner.last_run > first
        assert pruner.pruned == 6  # the two older events of each entry


# ---- podstore prune ----------------------------------------------------------------------------


def test_prune_command_keep_and_before(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        busy_history(store)
    time.sleep(0.05)
    out = podstore("--db", str(db), "prune", "--keep", "1d", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pruned 0 history events older than ")
    out = podstore("--db", str(db), "prune", "--keep", "0s", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pruned 30 history events older than ")
    with PodStore.open(db) as store:
        assert len(seqs(store)) == 10 and store.verify_history().ok
        busy_history(store, rounds=1)
    out = podstore("--db", str(db), "prune", "--before", "2099-01-01T00:00:00Z", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("pruned 10 history events older than 2099-01-01T00:00:00.000000Z\n")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "give one of --before TIME or --keep DURATION"),
        (["--keep", "1d", "--before", "2026-01-01"], 2, "give one of"),
        (["--keep", "3 weeks"], 2, "is not a duration"),
        (["--keep", "-1d"], 2, "is not a duration"),
        (["--before", "yesterday"], 2, "is not an ISO 8601 time"),
        (["--keep", "1d", "--readonly"], 1, "podstore: error: --readonly was given"),
    ],
)
def test_prune_command_refuses_bad_input_and_changes_nothing(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        busy_history(store)
        before = seqs(store)
    out = podstore("--db", str(db), "prune", *args, cwd=tmp_path)
    assert out.returncode == code, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    with PodStore.open(db) as store:
        assert seqs(store) == before


def test_durations() -> None:
    from podstore.cli.durations import describe, parse_duration

    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("90m") == 5400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == parse_duration("45") == 45
    assert parse_duration("2w") == 14 * 86400
    assert parse_duration("1.5h") == 5400
    assert describe(30 * 86400) == "30d" and describe(5400) == "1h30m" and describe(0) == "0s"
    for bad in ("", "d", "1y", "1 d", "1d-", "-5m", "inf"):
        with pytest.raises(ValueError):
            parse_duration(bad)


# ---- podstore watch --keep-history -------------------------------------------------------------


def test_watch_once_keep_history_prunes_after_the_sync(tmp_path: Path) -> None:
    rng = random.Random(21)
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "s.db"
    state = random_state(rng, 8)
    for _ in range(3):
        state.write(cp)
        run = podstore("--db", str(db), "watch", "--once", str(cp), cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        state = mutate(rng, state, 4)
    with PodStore.open(db, readonly=True) as store:
        before = seqs(store)
    time.sleep(1.1)
    state.write(cp)
    run = podstore(
        "--db", str(db), "watch", "--once", str(cp), "--keep-history", "1s", cwd=tmp_path
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with PodStore.open(db, readonly=True) as store:
        after = seqs(store)
        assert store.verify_history().ok
    new = [s for s in after if s > before[-1]]
    assert new, "the last sync wrote events"
    pruned = set(before) - set(after)
    assert pruned, "older history went"
    assert f"pruned {len(pruned)} history events older than " in run.stderr


def test_following_watch_prunes_at_start_and_logs_it(tmp_path: Path) -> None:
    rng = random.Random(22)
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "s.db"
    state = random_state(rng, 8)
    for _ in range(3):
        state.write(cp)
        assert podstore("--db", str(db), "watch", "--once", str(cp), cwd=tmp_path).returncode == 0
        state = mutate(rng, state, 4)
    with PodStore.open(db, readonly=True) as store:
        before = seqs(store)
    time.sleep(1.1)
    # No polling tick in the test's time: the prune comes after the first sync.
    w = WatchProcess(db, cp, "--keep-history", "1s", "--interval", "3600", log=tmp_path / "w.log")
    try:
        w.wait_log(r"pruned \d+ history events older than ", timeout=30)
    finally:
        code = w.stop()
    assert code == 0, w.log()
    with PodStore.open(db, readonly=True) as store:
        assert len(seqs(store)) < len(before)
        assert store.verify_history().ok


# ---- node scale --------------------------------------------------------------------------------

_PRUNE_API = """
import sys, podstore
store = podstore.PodStore.open(sys.argv[1], verify="off")
print(store.prune_history(sys.argv[2]))
"""


@pytest.mark.slow
def test_prune_at_node_scale_against_its_api_call(tmp_path: Path) -> None:
    """``podstore prune`` on a 20,000-entry store whose every entry was then replaced once
    (its history: an import and a replace event per entry, the registered events, a replace
    and a delete every 50th pod; the imports are what goes) against the API call in a child
    process, each on its own copy; both remove the same events."""
    big = ss.build(tmp_path / "big.db", 20_000)
    with PodStore.open(big, verify="off") as store, store.transaction():
        for e in ss.entries(20_000):
            moved = {numa: [f"{d}-moved" for d in ids or ()] for numa, ids in e.device_ids.items()}
            store.insert(e.pod_uid, e.container_name, e.resource_name, moved, e.alloc_resp)
    cut = "2099-01-01T00:00:00Z"
    copies = []
    for name in ("cli.db", "api.db"):
        shutil.copy(big, tmp_path / name)
        copies.append(tmp_path / name)
    cli = ss.measure(ss.podstore_argv("--db", str(copies[0]), "prune", "--before", cut))
    assert cli.code == 0, cli.stderr
    api_out = tmp_path / "api.out"
    api = ss.measure([sys.executable, "-c", _PRUNE_API, str(copies[1]), cut], stdout=api_out)
    assert api.code == 0, api.stderr
    removed = int(api_out.read_text())
    assert removed >= 20_000
    with PodStore.open(copies[0], readonly=True) as a, PodStore.open(copies[1], readonly=True) as b:
        assert seqs(a) == seqs(b)
        assert a.verify_history().ok
    report(
        "prune at 20,000 entries",
        events_removed=removed,
        cli_wall_s=round(cli.wall_s, 3),
        api_wall_s=round(api.wall_s, 3),
        cli_peak_rss_mib=round(cli.peak_rss_mib, 1),
        api_peak_rss_mib=round(api.peak_rss_mib, 1),
    )
    # Both whole processes: the command's start-up on top of the same transaction.
    assert cli.wall_s < 3 * api.wall_s + 2.0
    assert cli.peak_rss_mib < 200
