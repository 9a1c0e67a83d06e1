"""The file trigger in-process: the watch follows a directory path that appears step by step.

kubelet's directory may not exist when the follower starts; the trigger then watches the
deepest existing ancestor and moves down as the path appears. A directory created between
the trigger's look at the path and the arming of its watch sends its event to nobody, so the
trigger looks again after arming; without that the follower only notices at its next poll
(10 s by default). The race is run many times, each round bounded.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

from podstore.watch.trigger import FileTrigger
from podstore.watch.wakeup import Wakeup

pytest.importorskip("watchdog", reason="the trigger's file events come through watchdog")

ROUNDS = int(os.environ.get("PODSTORE_TRIGGER_ROUNDS", "60"))
#: Times per round the whole tree goes and comes back.
REINSTALLS = 3
#: How long a round may take to settle once the path exists (a stuck watch never does).
SETTLE = 3.0


def _grow(base: Path, parts: list[str], rng: random.Random) -> None:
    """Create base/parts[0]/parts[1]/… one level at a time, with short random pauses (some
    land inside the trigger's look-then-arm window)."""
    path = base
    for part in parts:
        path = path / part
        os.mkdir(path)
        time.sleep(rng.choice((0.0, 0.0, 0.0005, 0.001, 0.002, 0.004)))


def _settle(trigger: FileTrigger, wakeup: Wakeup, grower: threading.Thread, want: str) -> bool:
    """Play the follower while ``grower`` changes the path: refresh when a wake-up asks for it,
    never on a timer. Whether the watch reached ``want`` through file events alone."""
    deadline = None
    while True:
        wakeup.wait(0.05)
        if trigger.needs_refresh:
            trigger.refresh()
        if grower.is_alive():
            continue
        if deadline is None:
            deadline = time.monotonic() + SETTLE
        if trigger.armed == want or time.monotonic() > deadline:
            return trigger.armed == want


def _round(base: Path, rng: random.Random) -> str | None:
    """One round: the trigger starts on a missing path, the path appears; then the whole tree
    goes and comes back (a kubelet reinstall). None when the watch followed, else where it
    stayed behind."""
    parts = ["var", "lib", "kubelet", "device-plugins"]
    path = base.joinpath(*parts, "kubelet_internal_checkpoint")
    want = str(path.parent)
    wakeup = Wakeup()
    trigger = FileTrigger(str(path), wakeup.ring)
    trigger.start()
    try:
        assert trigger.armed == str(base)
        grower = threading.Thread(target=_grow, args=(base, parts, rng))
        grower.start()
        if not _settle(trigger, wakeup, grower, want):
            return f"appearing: {_rel(trigger.armed, base)}"

        def regrow() -> None:
            shutil.rmtree(base / parts[0])
            time.sleep(rng.choice((0.0, 0.0, 0.001, 0.005)))
            _grow(base, parts, rng)

        for _ in range(REINSTALLS):
            grower = threading.Thread(target=regrow)
            grower.start()
            if not _settle(trigger, wakeup, grower, want):
                return f"coming back: {_rel(trigger.armed, base)}"
        return None
    finally:
        trigger.stop()
        wakeup.close()


def _rel(armed: str | None, base: Path) -> str | None:
    return os.path.relpath(armed, base) if armed else None


def test_a_path_appearing_step_by_step_is_followed_without_polling(tmp_path: Path) -> None:
    rng = random.Random(31)
    stuck = []
    for i in range(ROUNDS):
        base = tmp_path / f"r{i}"
        base.mkdir()
        where = _round(base, rng)
        if where is not None:
            stuck.append((i, where))
    assert stuck == [], f"{len(stuck)} of {ROUNDS} rounds left the watch behind: {stuck}"
