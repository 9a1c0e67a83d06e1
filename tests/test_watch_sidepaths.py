"""The follower's side paths, each made to happen for real: polling with no file events, a
store error (locked past the busy timeout by another process, a full disk) with its retry,
backoff, counter and log line, and SIGTERM while a sync is held in progress."""

from __future__ import annotations

import random
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import tinyfs
from harness.watch_support import (
    WatchProcess,
    WriteLock,
    checkpoint_path,
    file_state,
    log_lines,
    mutate,
    random_state,
    store_state,
    wait_for,
)

from podstore import PodDevicesEntry, PodStore, check_store
from podstore.checkpoint import write_checkpoint_file
from podstore.watch.follower import RETRY_FIRST, Follower, SyncOutcome

pytest.importorskip("watchdog", reason="podstore watch follows files through watchdog")

# A child with watchdog installed but its observers unimportable: the trigger then has no
# file events (as on a file system without inotify) and the follower polls alone.
_NO_FILE_EVENTS = (
    "import sys; sys.modules['watchdog.observers'] = None\nfrom podstore.cli import main; main()"
)


@pytest.fixture
def cp(tmp_path: Path) -> Path:
    return checkpoint_path(tmp_path)


@pytest.fixture
def watches(tmp_path: Path) -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for w in started:
        w.kill()


def _reader(db: Path) -> PodStore:
    return PodStore.open(db, readonly=True, verify="off")


def _applied(db: Path, want: Any) -> bool:
    with _reader(db) as store:
        return bool(store_state(store) == want)


def _syncs(textfile: Path) -> dict[str, float]:
    """podstore_checkpoint_syncs_total by result, from the textfile the follower writes."""
    try:
        text = textfile.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    pattern = r'^podstore_checkpoint_syncs_total\{checkpoint="devices",result="(\w+)"\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


# ---- polling alone -----------------------------------------------------------------------------


def test_polling_alone_applies_renamed_files_when_file_events_are_unavailable(
    tmp_path: Path, cp: Path, watches: list[WatchProcess]
) -> None:
    """Only the --interval poll (the file's signature against the one last synced) can see
    these renames: the child has no file events at all."""
    rng = random.Random(41)
    state = random_state(rng, 5)
    state.write(cp)
    db = tmp_path / "store.db"
    w = WatchProcess(
        db, cp, "--interval", "0.3", log=tmp_path / "watch.log",
        command=[sys.executable, "-c", _NO_FILE_EVENTS],
    )  # fmt: skip
    watches.append(w)
    w.wait_log("polling only")
    w.wait_log("following")
    wait_for(lambda: _applied(db, file_state(state)), 20, step=0.05)
    for _ in range(3):
        state = mutate(rng, state, 2)
        state.write(cp)
        want = file_state(state)
        wait_for(lambda w=want: _applied(db, w), 10, step=0.05)  # type: ignore[misc]
    assert w.stop() == 0, w.log()


# ---- a store error: retry, backoff, counter, log -----------------------------------------------


def test_a_store_locked_past_the_busy_timeout_is_retried_counted_and_logged_once(
    tmp_path: Path, cp: Path, watches: list[WatchProcess]
) -> None:
    rng = random.Random(42)
    state = random_state(rng, 8)
    state.write(cp)
    db = tmp_path / "store.db"
    prom = tmp_path / "podstore.prom"
    w = WatchProcess(
        db, cp, "--interval", "3600", "--busy-timeout", "0.2", "--textfile", str(prom),
        log=tmp_path / "watch.log",
    )  # fmt: skip
    watches.append(w)
    w.wait_log("following")
    wait_for(lambda: _applied(db, file_state(state)), 20, step=0.05)
    wait_for(lambda: _syncs(prom).get("applied") == 1, 10, step=0.05)  # written after the sync
    with WriteLock(db) as lock:
        state = mutate(rng, state, 3)
        state.write(cp)
        # Retried on its own (no file event after the first), each failure counted.
        wait_for(lambda: _syncs(prom).get("error", 0) >= 3, 30, step=0.05)
        assert not _applied(db, file_state(state))
        lock.release()
    # The file has not changed since: only the retry can bring it in.
    wait_for(lambda: _applied(db, file_state(state)), 30, step=0.05)
    wait_for(lambda: _syncs(prom)["applied"] == 2, 10, step=0.05)
    assert w.stop() == 0
    log = w.log()
    errors = [line for line in log.splitlines() if "sync error" in line]
    # The same problem again and again is one line; its end is another.
    assert len(errors) == 1, log
    assert "ERROR" in errors[0] and "locked past the busy timeout" in errors[0], log
    assert "store left as it was" in errors[0]
    assert log.index("good again") > log.index("sync error"), log
    assert check_store(db) == []


class _Outcomes:
    """The follower's outcomes with the monotonic time each sync started and ended."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()

    def __call__(self, outcome: SyncOutcome) -> None:
        end = time.monotonic()
        with self.lock:
            self.seen.append((outcome.result, end - outcome.seconds, end))

    def results(self) -> list[str]:
        with self.lock:
            return [r for r, _s, _e in self.seen]


@pytest.fixture
def follower_log() -> Iterator[list[str]]:
    """What the follower logs."""
    with log_lines() as lines:
        yield lines


def _follow(follower: Follower) -> threading.Thread:
    thread = threading.Thread(target=follower.run, name="follower", daemon=True)
    thread.start()
    return thread


def test_store_error_retries_back_off(tmp_path: Path, cp: Path, follower_log: list[str]) -> None:
    """The waits between failed syncs double from RETRY_FIRST up to the polling interval."""
    rng = random.Random(43)
    state = random_state(rng, 4)
    state.write(cp)
    db = tmp_path / "store.db"
    interval = 4 * RETRY_FIRST
    with PodStore.open(db, busy_timeout=0.1) as store:
        outcomes = _Outcomes()
        follower = Follower(store, str(cp), interval=interval, on_sync=[outcomes])
        assert follower.sync().result == "applied"
        state = mutate(rng, state, 2)
        state.write(cp)
        with WriteLock(db) as lock:
            thread = _follow(follower)
            try:
                wait_for(lambda: outcomes.results().count("error") >= 4, 30, step=0.01)
                lock.release()
                wait_for(lambda: outcomes.results()[-1] == "applied", 30, step=0.01)
            finally:
                follower.stop()
                thread.join(30)
        assert store_state(store) == file_state(state)
        assert follower.stats.snapshot().syncs["error"] >= 4
    seen = outcomes.seen[1:]  # the first is the direct sync before following
    waits = [seen[k + 1][1] - seen[k][2] for k in range(3)]
    slack = 0.05  # the hook stamps its time a moment after the retry was scheduled
    for k, wanted in enumerate([RETRY_FIRST, 2 * RETRY_FIRST, 4 * RETRY_FIRST]):
        assert waits[k] >= wanted - slack, (k, waits)
    assert sum("sync error" in line for line in follower_log) == 1, follower_log


def _big_entries(n: int) -> list[PodDevicesEntry]:
    devices = 40
    return [
        PodDevicesEntry(
            f"big-{i}", "c", "example.com/gpu",
            {0: [f"dev-{i}-{k:03d}-" + "x" * 48 for k in range(devices)]}, b"",
        )
        for i in range(n)
    ]  # fmt: skip


def test_a_full_disk_is_retried_until_space_comes_back(
    tmp_path: Path, follower_log: list[str]
) -> None:
    """The store on an 8 MiB tmpfs filled by a ballast file: the sync of a large file fails
    with the disk full, is counted and logged as that (SQLite rolls the transaction back by
    itself there; the sync's clean-up must not hide the error), and the retry applies it once
    the ballast is gone — the file unchanged meanwhile. The follower runs in a thread of its
    own, so its connection is not the one of the first sync."""
    cp = checkpoint_path(tmp_path)
    write_checkpoint_file(cp, _dumps([]))
    with tinyfs.tiny_fs(tmp_path / "tiny") as mnt:
        db = mnt / "store.db"
        with PodStore.open(db) as store:
            outcomes = _Outcomes()
            follower = Follower(store, str(cp), interval=4 * RETRY_FIRST, on_sync=[outcomes])
            assert follower.sync().result == "applied"
            ballast = mnt / "ballast"
            tinyfs.fill(ballast)
            # About 2.6 MB of WAL: far more than the room left, well within the disk.
            big = _big_entries(150)
            write_checkpoint_file(cp, _dumps(big))
            thread = _follow(follower)
            try:
                wait_for(lambda: outcomes.results().count("error") >= 2, 30, step=0.01)
                assert store.pods() == set()
                ballast.unlink()
                wait_for(lambda: outcomes.results()[-1] == "applied", 30, step=0.01)
            finally:
                follower.stop()
                thread.join(30)
            assert store.pods() == {e.pod_uid for e in big}
            assert follower.stats.snapshot().syncs["error"] >= 2
        assert check_store(db) == []
    errors = [line for line in follower_log if "sync error" in line]
    assert len(errors) == 1 and errors[0].startswith("ERROR"), follower_log
    assert "full" in errors[0].lower(), errors


def _dumps(entries: list[PodDevicesEntry]) -> bytes:
    from podstore.checkpoint import dumps_checkpoint

    return dumps_checkpoint(entries, {"example.com/gpu": []})


# ---- SIGTERM while a sync is in progress ------------------------------------------------------


class _FileReads:
    """Counts the times the checkpoint was read to the end and closed (inotify's
    IN_CLOSE_NOWRITE on its directory): the follower's sync reading the file."""

    def __init__(self, path: Path) -> None:
        from watchdog.observers import Observer

        self.path = str(path)
        self.count = 0
        self._cond = threading.Condition()
        self._observer = Observer()
        self._observer.schedule(self, str(path.parent), recursive=False)
        self._observer.start()

    def dispatch(self, event: Any) -> None:
        if event.event_type == "closed_no_write" and str(event.src_path) == self.path:
            with self._cond:
                self.count += 1
                self._cond.notify_all()

    def wait_beyond(self, count: int, timeout: float) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.count > count, timeout), "never read"

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(10)


def test_sigterm_finishes_the_sync_held_in_progress(
    tmp_path: Path, cp: Path, watches: list[WatchProcess]
) -> None:
    """Another process holds the store's write lock, so the sync of a new file reads it and
    then waits for the lock (busy timeout 60 s). SIGTERM lands there; the follower must go on
    waiting, commit the file once the lock is released, and only then exit 0."""
    rng = random.Random(44)
    state = random_state(rng, 30)
    state.write(cp)
    db = tmp_path / "store.db"
    w = WatchProcess(
        db, cp, "--interval", "3600", "--busy-timeout", "60", log=tmp_path / "watch.log"
    )
    watches.append(w)
    w.wait_log("following")
    wait_for(lambda: _applied(db, file_state(state)), 20, step=0.05)
    reads = _FileReads(cp)
    try:
        with WriteLock(db) as lock:
            before = reads.count
            state = mutate(rng, state, 20)
            state.write(cp)
            reads.wait_beyond(before, 20)  # the sync has read the file: it is in progress
            w.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert w.proc.poll() is None, "exited with the sync still waiting for the lock"
            assert not _applied(db, file_state(state))
            lock.release()
        code = w.proc.wait(timeout=60)
    finally:
        reads.stop()
    log = w.log()
    assert code == 0, log
    assert _applied(db, file_state(state)), "the sync in progress was abandoned"
    applied = re.search(r" INFO applied ", log)
    stopped = re.search(r" INFO stopped$", log, re.M)
    assert applied and stopped and applied.start() < stopped.start(), log
    assert check_store(db) == []
