"""``podstore watch`` as a node runs it: a real subprocess following a file that is replaced by
rename, as kubelet replaces it."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.watch_support import (
    State,
    WatchProcess,
    canonical_event,
    checkpoint_path,
    expected_events,
    file_state,
    mutate,
    normal,
    podstore_command,
    random_state,
    store_state,
    wait_for,
)

from podstore import PodStore, check_store, replay_history
from podstore.checkpoint import write_checkpoint_file

#: kubelet's rename must be applied within this (docs/watch.md).
WITHIN = 1.0


@pytest.fixture
def cp(tmp_path: Path) -> Path:
    return checkpoint_path(tmp_path)


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[Any]:
    started: list[WatchProcess] = []

    def start(cp: Path, *args: str, db: Path | None = None) -> WatchProcess:
        w = WatchProcess(
            db or tmp_path / "store.db", cp, *args, log=tmp_path / f"watch{len(started)}.log"
        )
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


def reader(db: Path) -> PodStore:
    return PodStore.open(db, readonly=True, verify="off")


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*podstore_command(), "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def no_errors(db: Path) -> None:
    assert [str(f) for f in check_store(db) if f.severity == "error"] == []


# ---- --once ------------------------------------------------------------------------------------


def test_once_exit_status_and_a_bad_file_leaves_the_store_alone(tmp_path: Path, cp: Path) -> None:
    db = tmp_path / "store.db"
    state = random_state(random.Random(5), 6)
    state.write(cp)
    assert run(db, "watch", "--once", str(cp)).returncode == 0
    assert run(db, "watch", "--once", str(cp)).returncode == 0  # unchanged
    with reader(db) as store:
        expected = store_state(store)
        events = len(store.history())
    for damage in (b"", b'{"Data":', state.data().replace(b'"Checksum":', b'"Checksum":9')):
        cp.write_bytes(damage)
        proc = run(db, "watch", "--once", str(cp))
        assert proc.returncode == 1, proc.stderr
        assert "store left as it was" in proc.stderr and "Traceback" not in proc.stderr
    cp.unlink()
    proc = run(db, "watch", "--once", str(cp))
    assert proc.returncode == 1 and "sync missing:" in proc.stderr
    with reader(db) as store:
        assert store_state(store) == expected and len(store.history()) == events
    no_errors(db)


# ---- following ---------------------------------------------------------------------------------


def test_a_rename_is_applied_within_a_second(tmp_path: Path, cp: Path, watch: Any) -> None:
    rng = random.Random(21)
    state = random_state(rng, 40)
    state.write(cp)
    w = watch(cp, "--interval", "3600")  # no polling: the file event alone must do it
    db = tmp_path / "store.db"
    w.wait_log("following")
    latencies = []
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 20)
        for _ in range(8):
            state = mutate(rng, state, 2)
            state.write(cp)
            want = file_state(state)
            latencies.append(wait_for(lambda w=want: store_state(store) == w, 10))
    assert w.stop() == 0
    assert max(latencies) < WITHIN, latencies
    no_errors(db)


def test_a_burst_of_200_rewrites_ends_in_the_last_good_file(
    tmp_path: Path, cp: Path, watch: Any
) -> None:
    rng = random.Random(22)
    state = random_state(rng, 20)
    state.write(cp)
    w = watch(cp, "--interval", "3600")
    db = tmp_path / "store.db"
    w.wait_log("following")
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 20)
        start_seq = store.history()[-1].seq
        good = [state]
        for i in range(200):
            if i % 17 == 5:
                # Now and then a bad file (torn), put in place by rename too.
                write_checkpoint_file(cp, state.data()[:-7])
                continue
            state = mutate(rng, state, 2)
            good.append(state)
            state.write(cp)
        # A burst may replace every torn file before the follower reads it: one more torn file,
        # left in place until it is logged, so that the refusal is always exercised.
        write_checkpoint_file(cp, state.data()[:-7])
        wait_for(lambda: w.log().count("sync invalid") >= 1, 10)
        state = mutate(rng, state, 2)
        good.append(state)
        state.write(cp)
        wait_for(lambda: store_state(store) == file_state(state), 10)
        history = store.history()
    assert w.stop() == 0
    # What it applied along the way is a chain of whole files: each step's events are exactly
    # the difference between two of the files written, in order.
    events = [canonical_event(e) for e in history if e.seq > start_seq]
    assert _chain(events, good), "events are not a sequence of whole-file syncs"
    assert replay_history(history).entries == {
        (e.pod_uid, e.container_name, e.resource_name): e.device_ids
        for e in PodStore.open(db, readonly=True).to_checkpoint_data()
    }
    no_errors(db)
    # Bad files were logged, at most once each (13 were written).
    bad = w.log().count("sync invalid")
    assert 1 <= bad <= 13


def _chain(events: list[Any], states: list[State]) -> bool:
    """Whether ``events`` is expected_events(s_a, s_b) + expected_events(s_b, s_c) + … for some
    increasing sequence of the states written, from states[0] to a state equal to the last."""
    last = file_state(states[-1])
    steps: dict[tuple[int, int], list[Any]] = {}
    failed: set[tuple[int, int]] = set()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(states) + 100))

    def explain(at: int, pos: int) -> bool:
        if pos == len(events):
            return file_state(states[at]) == last
        if (at, pos) in failed:
            return False
        for nxt in range(at + 1, len(states)):
            step = steps.get((at, nxt))
            if step is None:
                step = steps[(at, nxt)] = expected_events(states[at], states[nxt])
            if (
                step
                and normal(events[pos : pos + len(step)]) == step
                and explain(nxt, pos + len(step))
            ):
                return True
        failed.add((at, pos))
        return False

    return explain(0, 0)


def test_missing_file_and_directory_come_and_go(tmp_path: Path, watch: Any) -> None:
    """The directory does not exist at start; it appears, the file appears, the file goes, the
    whole directory goes (a kubelet reinstall) and comes back. (The arming races behind it are
    run many times in-process: tests/test_watch_trigger.py.)"""
    cp = tmp_path / "var" / "lib" / "kubelet" / "device-plugins" / "kubelet_internal_checkpoint"
    db = tmp_path / "store.db"
    w = watch(cp, "--interval", "3600")
    w.wait_log("does not exist yet")
    rng = random.Random(23)
    state = random_state(rng, 5)
    cp.parent.mkdir(parents=True)
    state.write(cp)
    with reader(db) as store:
        assert wait_for(lambda: store_state(store) == file_state(state), 5) < WITHIN + 0.5
        cp.unlink()
        w.wait_log("sync missing")
        assert store_state(store) == file_state(state)  # a missing file changes nothing
        state = mutate(rng, state)
        state.write(cp)
        assert wait_for(lambda: store_state(store) == file_state(state), 5) < WITHIN
        cp.unlink()
        cp.parent.rmdir()
        w.wait_log("watching .*kubelet\n", timeout=10)
        cp.parent.mkdir()
        state = mutate(rng, state)
        state.write(cp)
        wait_for(lambda: store_state(store) == file_state(state), 5)
    assert w.stop(signal.SIGINT) == 0
    no_errors(db)


def test_polling_catches_an_in_place_write(tmp_path: Path, cp: Path, watch: Any) -> None:
    """A change made without any rename (written in place) is still caught."""
    rng = random.Random(24)
    state = random_state(rng, 4)
    state.write(cp)
    w = watch(cp, "--interval", "0.3")
    db = tmp_path / "store.db"
    w.wait_log("following")
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 20)
        state = mutate(rng, state)
        with open(cp, "r+b") as f:
            f.write(state.data())
            f.truncate()
        wait_for(lambda: store_state(store) == file_state(state), 5)
    assert w.stop() == 0


def test_sigterm_lets_the_sync_in_progress_finish(tmp_path: Path, cp: Path, watch: Any) -> None:
    rng = random.Random(25)
    state = random_state(rng, 300)
    state.write(cp)
    w = watch(cp, "--interval", "3600")
    db = tmp_path / "store.db"
    w.wait_log("following")
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 20)
    before = file_state(state)
    state = mutate(rng, state, 200)
    state.write(cp)
    time.sleep(0.02)  # the sync has started
    assert w.stop() == 0
    assert re.search(r" INFO stopped$", w.log(), re.M), w.log()
    with reader(db) as store:
        # Either the whole new file or none of it: one sync is one transaction.
        assert store_state(store) in (file_state(state), before)
    no_errors(db)


def test_follower_and_a_writer_share_the_store_without_busy_errors(
    tmp_path: Path, cp: Path, watch: Any
) -> None:
    rng = random.Random(26)
    state = random_state(rng, 100)
    state.write(cp)
    db = tmp_path / "store.db"
    w = watch(cp, "--interval", "3600")
    w.wait_log("following")
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 20)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        for _ in range(60):
            state = mutate(rng, state, 5)
            state.write(cp)
            time.sleep(0.01)
    finally:
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err.decode()
    assert int(out.split()[-1]) > 0
    state = mutate(rng, state, 1)  # one more rewrite, after the writer's last change
    state.write(cp)
    with reader(db) as store:
        wait_for(lambda: store_state(store) == file_state(state), 10)
    assert w.stop() == 0
    log = w.log()
    assert "sync error" not in log and "busy" not in log.lower(), log
    no_errors(db)


# A node agent writing its own pods (that the file never lists, so each sync drops them).
_WRITER = """
import sys, time
from podstore import PodStore
store = PodStore.open(sys.argv[1], busy_timeout=10)
n = 0
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline:
    with store.transaction():
        store.insert(f"agent-{n % 7}", "c", "example.com/gpu", {0: [f"a{n}"]}, b"")
        store.set_registered_devices(store.registered_devices())
    store.delete([f"agent-{(n + 3) % 7}"])
    store.pod_devices(f"agent-{n % 7}", "example.com/gpu")
    n += 1
print(n)
"""


def test_ship_to_without_the_fleet_driver_is_one_line_and_exit_2(tmp_path: Path, cp: Path) -> None:
    """An install without podstore[fleet] (the driver made unimportable in the child) gets an
    install hint, not a traceback, and the URL's password is not echoed."""
    random_state(random.Random(1), 2).write(cp)
    code = "import sys; sys.modules['psycopg'] = None\nfrom podstore.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--db", str(tmp_path / "store.db"), "watch", str(cp),
         "--ship-to", "postgresql://podstore:s3cret@db.example:5432/fleet"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "install podstore[fleet]" in lines[0], proc.stderr
    assert "s3cret" not in proc.stderr


def test_import_podstore_and_node_commands_load_no_optional_dependency() -> None:
    code = (
        "import sys, podstore, podstore.cli.main, podstore.watch.follower\n"
        "from podstore.cli.main import cli\n"
        "bad = [m for m in ('watchdog', 'prometheus_client') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_watch_help_names_the_contract_options(tmp_path: Path) -> None:
    proc = run(tmp_path / "s.db", "watch", "--help")
    for option in ("--once", "--interval", "--metrics-addr", "--textfile", "--ship-to", "--node"):
        assert option in proc.stdout
    assert "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint" in proc.stdout


def test_bad_metrics_addr_is_a_usage_error(tmp_path: Path, cp: Path) -> None:
    proc = run(tmp_path / "s.db", "watch", str(cp), "--metrics-addr", "::1:80")
    assert proc.returncode == 2 and "brackets" in proc.stderr
