"""``podstore watch`` on a checkpoint it cannot read (permission denied, a directory in its
place): no usage error at start-up, but a sync counted ``invalid`` and waited out until a good
file is there; ``podstore_checkpoint_last_failed_sync_timestamp_seconds`` tells the failure
from the last good sync (what ``PodstoreCheckpointStale`` compares).

Unreadable for real: as root, the watch runs with every capability dropped (as the unit and
the DaemonSet run it) on a file another uid owns, mode 0600; as another user, on a mode-000
file.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.watch_support import WatchProcess, checkpoint_path, random_state, wait_for
from prometheus_client.parser import text_string_to_metric_families

from podstore import PodStore

_SERVING = r"serving metrics on http://([0-9.]+):(\d+)/metrics"


def no_caps() -> list[str]:
    """argv prefix that makes a file of another owner unreadable: root without any
    capability (none needed when not root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed: root reads every file")
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def make_unreadable(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
        path.chmod(0o600)
    else:
        path.chmod(0)


def make_readable(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, 0, 0)
    path.chmod(0o600)


def gauges(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "podstore_checkpoint_syncs_total":
                out[s.labels["result"]] = s.value
            elif s.name.startswith("podstore_checkpoint_last_"):
                out[s.name.removeprefix("podstore_checkpoint_")] = s.value
    return out


@pytest.fixture
def watches() -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for w in started:
        w.kill()


@pytest.mark.parametrize("kind", ["permission denied", "a directory"])
def test_an_unreadable_checkpoint_is_counted_invalid_and_waited_out(
    tmp_path: Path, watches: list[WatchProcess], kind: str
) -> None:
    prefix = no_caps()
    cp = checkpoint_path(tmp_path)
    state = random_state(random.Random(31), 5)
    if kind == "a directory":
        cp.mkdir()
    else:
        state.write(cp)
        make_unreadable(cp)
    db = tmp_path / "store" / "s.db"
    w = WatchProcess(
        db, cp, "--interval", "0.5", "--metrics-addr", "127.0.0.1:0",
        log=tmp_path / "w.log", command=[*prefix, *_podstore()],
    )  # fmt: skip
    watches.append(w)
    found = w.wait_log(_SERVING, timeout=60)
    base = f"http://{found[1]}:{found[2]}"
    wait_for(lambda: gauges(base)["invalid"] >= 1, 30, step=0.05)
    g = gauges(base)
    assert g["last_sync_timestamp_seconds"] == 0
    assert g["last_failed_sync_timestamp_seconds"] > 0
    assert w.proc.poll() is None, w.log()
    assert "store left as it was" in w.log()
    # A good file: applied (the polling fallback sees the change of owner or the new file).
    if kind == "a directory":
        cp.rmdir()
        state.write(cp)
    else:
        make_readable(cp)
    wait_for(lambda: gauges(base)["applied"] == 1, 30, step=0.05)
    g = gauges(base)
    assert g["last_sync_timestamp_seconds"] > g["last_failed_sync_timestamp_seconds"] > 0
    assert w.stop() == 0, w.log()
    with PodStore.open(db, readonly=True) as store:
        assert store.pods()


def test_once_on_an_unreadable_checkpoint_exits_1_not_2(tmp_path: Path) -> None:
    prefix = no_caps()
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(32), 3).write(cp)
    make_unreadable(cp)
    db = tmp_path / "s.db"
    run = subprocess.run(
        [*prefix, *_podstore(), "--db", str(db), "watch", "--once", str(cp)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "sync invalid" in run.stderr and "ermission denied" in run.stderr, run.stderr
    assert "Usage:" not in run.stderr


def _podstore() -> list[str]:
    from harness.watch_support import podstore_command

    return podstore_command()
