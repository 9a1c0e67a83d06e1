"""Power loss during the upgrade of a filled store: the old revision or the new, never between.

The power-loss method of tests/harness/powerloss.py, applied to the one write a node makes
once per release: ``PodStore.open`` of a filled store (tests/harness/filled.py, 10,000 entries)
at every revision Alembic knows other than the head. The open is recorded statement for
statement (the probe, the quick_check, Alembic's transaction, the store's own connection),
replayed through apsw on the logging VFS starting from the filled file's bytes (durable), and
for random points of that I/O log the disk images a power cut could leave are rebuilt
(durable bytes plus any subset of later writes, torn at sector boundaries, or with
``keep=1.0`` all of them whole) and checked as the kill harness checks its files
(harness/filled.outcome): at the old revision exactly as before, or at the head, verified
clean, with every entry. After ``open`` returned, only the new revision is acceptable.

PODSTORE_MIGRATION_POWERLOSS_TRIALS sets the crash images per starting revision (default 24).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import apsw  # noqa: F401  (in CI a missing test extra must fail, not skip)
else:
    pytest.importorskip("apsw", reason="apsw (test extra) drives the power-loss VFS")

from harness import filled, powerloss
from harness.figures import report
from harness.recorder import recording

from podstore import PodStore

TRIALS = int(os.environ.get("PODSTORE_MIGRATION_POWERLOSS_TRIALS", "24"))
DB = "store.db"


def _upgrade_log(start: filled.Start, tmp: Path) -> tuple[powerloss.IOLog, bytes]:
    """Record PodStore.open upgrading a copy of the filled file; replay it through the VFS."""
    rec_dir = tmp / f"rec-{start.revision}"
    rec_dir.mkdir()
    filled.copy_store(start.path, rec_dir / DB)
    with recording() as rec:
        # verify="blocking": one connection at a time, as the recorded I/O model assumes
        store = PodStore.open(rec_dir / DB, verify="blocking")
        rec.ack(0)  # the upgrade is done once open returns
        store.close()
    initial = start.path.read_bytes()
    replay_dir = tmp / f"replay-{start.revision}"
    replay_dir.mkdir()
    log = powerloss.replay(
        rec.events,
        replay_dir,
        DB,
        powerloss.ReplayOptions(),
        f"podstore-upgrade-{start.revision}",
        initial=initial,
    )
    return log, initial


@pytest.mark.slow
def test_power_loss_during_upgrades_leaves_the_old_or_the_new_revision(
    filled_stores: filled.FilledStores, tmp_path: Path
) -> None:
    started = time.monotonic()
    rng = random.Random(20261203)
    figures: dict[str, object] = {}
    for rev in filled.old_revisions():
        start = filled_stores.starts[rev]
        log, initial = _upgrade_log(start, tmp_path)
        n = len(log.events)
        acked_at = next(i for i, e in enumerate(log.events) if e.kind == "ack")
        # Uniform over the log, plus the two ends and the moment open returned.
        points = sorted({0, acked_at, n, *(rng.randrange(n + 1) for _ in range(TRIALS - 3))})
        outcomes: Counter[str] = Counter()
        image_dir = tmp_path / f"image-{rev}"
        for k, model in powerloss.walk(log, DB, points, initial):
            keep = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
            powerloss.write_images(model.crash_images(rng, keep), image_dir)
            got = filled.outcome(image_dir / DB, filled_stores, start)
            if model.acked >= 0:
                assert got == "new", f"{rev}: event {k}/{n} after open returned, file is {got}"
            outcomes[got] += 1
            outcomes["after_open_returned" if model.acked >= 0 else "before_open_returned"] += 1
        assert outcomes["old"] and outcomes["new"], outcomes  # both sides of the commit hit
        figures[f"{rev}->{filled_stores.head}"] = {
            "io_events": n,
            "wal_fsyncs": sum(1 for e in log.events if e.kind == "sync" and e.name != DB),
            "main_file_fsyncs": sum(1 for e in log.events if e.kind == "sync" and e.name == DB),
            "images": len(points),
            "left_old": outcomes["old"],
            "left_new": outcomes["new"],
            "after_open_returned": outcomes["after_open_returned"],
        }
    report(
        "migration-powerloss",
        entries=filled_stores.entries,
        seconds=round(time.monotonic() - started, 1),
        per_upgrade=figures,
    )
