"""Power loss: only fsynced bytes are certain; every acknowledged commit must still be there.

tests/harness/powerloss.py has the method: podstore's own statements are recorded, replayed
through apsw on a VFS that logs every write and fsync, and for random crash points the files
a disk could hold are rebuilt (synced bytes, plus any subset of the unsynced writes, torn at
sector boundaries) and opened with podstore.

- default settings (WAL, synchronous=FULL): 0 corruption, 0 lost acknowledged commits, the
  in-flight call entirely there or absent;
- durability="normal": never corrupt, but it loses acknowledged commits where the same
  workload at "full" loses none (the harness must see that);
- synchronous=OFF forced on every connection: the checker must find damaged files (its teeth);
- keep=1.0 (nothing lost, nothing torn) rebuilds exactly the files the replay left.

PODSTORE_POWERLOSS_TRIALS scales the number of crash points (default 400 for the default
settings).
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import apsw  # noqa: F401  (in CI a missing test extra must fail, not skip)
else:
    pytest.importorskip("apsw", reason="apsw (test extra) drives the power-loss VFS")

from harness import powerloss, workload
from harness.figures import report
from harness.recorder import Event, recording

from podstore import PodStore, PodStoreError, StoreCorruptError
from podstore.storage.selfcheck import check_connection, has_errors

TRIALS = int(os.environ.get("PODSTORE_POWERLOSS_TRIALS", "400"))
DB = "store.db"


@dataclass
class Recorded:
    events: list[Event]
    states: list[workload.State]  # states[m]: after the first m operations


def record(directory: Path, seed: int, ops: int, durability: str = "full") -> Recorded:
    """Run ``ops`` workload operations on a fresh store, recording podstore's statements."""
    directory.mkdir(parents=True, exist_ok=True)
    model = workload.Model()
    states = [model.state()]
    with recording() as rec:
        # One connection, as the recorded I/O model assumes (no background check).
        store = PodStore.open(
            directory / DB,
            durability=durability,  # type: ignore[arg-type]
            verify="blocking",
        )
        for i in range(ops):
            op = workload.make_op(seed, i)
            workload.apply(store, op)
            rec.ack(i)
            model.apply(op)
            with rec.pause():
                assert workload.store_state(store) == model.state()
            states.append(model.state())
        store.close()
    return Recorded(rec.events, states)


@dataclass
class Outcome:
    trials: int = 0
    ok: int = 0
    in_flight_applied: int = 0
    lost: int = 0
    corrupt_at_open: int = 0  # PodStore.open's quick_check refused the image
    corrupt_by_verify: int = 0  # opened, but integrity_check or an invariant failed
    mismatch: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def corrupt(self) -> int:
        return self.corrupt_at_open + self.corrupt_by_verify

    def damaged(self) -> int:
        return self.lost + self.corrupt + self.mismatch

    def figures(self) -> dict[str, int]:
        return {
            "trials": self.trials,
            "ok": self.ok,
            "in_flight_applied": self.in_flight_applied,
            "lost_acknowledged": self.lost,
            "corrupt_at_open": self.corrupt_at_open,
            "corrupt_by_verify": self.corrupt_by_verify,
            "other_mismatch": self.mismatch,
        }


def _check(directory: Path, rec: Recorded, acked: int, out: Outcome, where: str) -> None:
    """Open the crash image; classify against the states the workload went through."""
    out.trials += 1
    done = acked + 1  # operations acknowledged
    try:
        with PodStore.open(directory / DB, verify="blocking") as store:
            got = workload.store_state(store)
        conn = sqlite3.connect(directory / DB, isolation_level=None)
        try:
            findings = check_connection(conn)
        finally:
            conn.close()
    except StoreCorruptError as exc:
        out.corrupt_at_open += 1
        out.examples.append(f"{where}: {exc}")
        return
    except PodStoreError as exc:
        out.mismatch += 1
        out.examples.append(f"{where}: open failed: {type(exc).__name__}: {exc}")
        return
    if has_errors(findings):
        out.corrupt_by_verify += 1
        out.examples.append(f"{where}: {[str(f) for f in findings][:3]}")
        return
    if got == rec.states[done]:
        out.ok += 1
    elif done + 1 < len(rec.states) and got == rec.states[done + 1]:
        out.ok += 1
        out.in_flight_applied += 1
    elif got in rec.states[:done]:
        out.lost += 1
        out.examples.append(f"{where}: {done} acknowledged, state is after {rec.states.index(got)}")
    else:
        out.mismatch += 1
        out.examples.append(
            f"{where}: matches no state: " + workload.describe_difference(got, rec.states[done])
        )


def crash_trials(
    tmp: Path,
    rec: Recorded,
    options: powerloss.ReplayOptions,
    trials: int,
    seed: int,
    name: str,
) -> tuple[Outcome, int, int]:
    replay_dir = tmp / f"{name}-replay"
    replay_dir.mkdir()
    log = powerloss.replay(rec.events, replay_dir, DB, options, f"podstore-{name}")
    rng = random.Random(seed)
    n = len(log.events)
    points: Sequence[int] = [rng.randrange(n + 1) for _ in range(trials - 1)] + [n]
    out = Outcome()
    image_dir = tmp / f"{name}-image"
    for k, model in powerloss.walk(log, DB, points):
        keep = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
        powerloss.write_images(model.crash_images(rng, keep), image_dir)
        _check(image_dir, rec, model.acked, out, f"{name} event {k}/{n} keep={keep}")
    checkpoints = sum(1 for e in log.events if e.kind == "sync" and e.name == DB)
    return out, n, checkpoints


@pytest.mark.slow
def test_power_loss_with_default_settings_loses_nothing(tmp_path: Path) -> None:
    """WAL + synchronous=FULL: every acknowledged commit survives, nothing is corrupt."""
    plain = record(tmp_path / "rec-a", seed=11, ops=120)
    # Same statements, with checkpoints every 8 WAL pages so crashes land inside them too.
    busy = record(tmp_path / "rec-b", seed=12, ops=120)
    half = max(TRIALS // 2, 2)
    a, events_a, ckpt_a = crash_trials(tmp_path, plain, powerloss.ReplayOptions(), half, 1, "full")
    b, events_b, ckpt_b = crash_trials(
        tmp_path, busy, powerloss.ReplayOptions(wal_autocheckpoint=8), half, 2, "full-ckpt"
    )
    report(
        "powerloss-full",
        operations=240,
        io_events=events_a + events_b,
        main_file_fsyncs=ckpt_a + ckpt_b,
        **{k: v + b.figures()[k] for k, v in a.figures().items()},
    )
    for out in (a, b):
        assert out.damaged() == 0, out.examples[:10]
        assert out.ok == out.trials


@pytest.mark.slow
def test_power_loss_with_normal_durability_loses_commits_full_does_not(tmp_path: Path) -> None:
    """durability="normal" (synchronous=NORMAL) never corrupts but loses acknowledged commits
    (it does not fsync the WAL at commit); the same workload at the default "full", crashed
    at as many points, loses none — the difference is the setting, not the workload."""
    trials = max(TRIALS // 4, 2)
    results = {}
    for durability in ("normal", "full"):
        rec = record(tmp_path / f"rec-{durability}", seed=13, ops=100, durability=durability)
        out, events, _ = crash_trials(
            tmp_path, rec, powerloss.ReplayOptions(), trials, 3, durability
        )
        results[durability] = out
        report(
            f"powerloss-{durability}-same-workload",
            operations=100,
            io_events=events,
            **out.figures(),
        )
    normal, full = results["normal"], results["full"]
    assert normal.corrupt == 0 and normal.mismatch == 0, normal.examples[:10]
    assert normal.lost > 0, "durability='normal' lost nothing: the harness cannot see it"
    assert full.damaged() == 0 and full.ok == full.trials, full.examples[:10]


@pytest.mark.slow
def test_power_loss_harness_has_teeth(tmp_path: Path) -> None:
    """With synchronous=OFF nothing is fsynced: the same harness must see the damage."""
    rec = record(tmp_path / "rec", seed=14, ops=100)
    out, events, _ = crash_trials(
        tmp_path,
        rec,
        powerloss.ReplayOptions(synchronous=0),
        max(TRIALS // 4, 2),
        4,
        "off",
    )
    report("powerloss-synchronous-off", operations=100, io_events=events, **out.figures())
    # Lost commits alone would not do: the checker must find damaged files.
    assert out.corrupt > 0, f"synchronous=OFF left no damaged file: {out.figures()}"
    assert out.corrupt_by_verify + out.corrupt_at_open == out.corrupt


def test_keep_everything_is_the_real_files(tmp_path: Path) -> None:
    """The disk model itself: an image built with keep=1.0 (every write whole, every
    directory change) is byte for byte the files the replay really left at that point."""
    rec = record(tmp_path / "rec", seed=15, ops=30)
    log = powerloss.replay(
        rec.events,
        _fresh(tmp_path / "real"),
        DB,
        powerloss.ReplayOptions(wal_autocheckpoint=8),
        "podstore-keep",
        snapshot_every=29,
    )
    points = sorted(log.snapshots)
    assert len(points) >= 40 and points[-1] == len(log.events)
    rng = random.Random(5)
    for k, model in powerloss.walk(log, DB, points):
        assert model.crash_images(rng, 1.0) == log.snapshots[k], f"event {k} of {len(log.events)}"
    report("powerloss-keep-all", io_events=len(log.events), points_compared=len(points))


def _fresh(directory: Path) -> Path:
    directory.mkdir()
    return directory
