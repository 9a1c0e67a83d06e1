"""fork() after PodStore.open: every way a child can touch a store opened before the fork is
safe, or raises PodStoreError at once (docs/api.md, "Threads, processes and fork").

SQLite keeps each process's POSIX locks in its own bookkeeping, shared by every connection of
the process to a file; a forked child inherits that bookkeeping but not the locks. A child
connection made while inherited ones are open therefore believes it holds locks it does not
hold: the parent's last close checkpoints and deletes the WAL the child writes to, an
inherited write lock is never released, an inherited read mark pins the WAL for ever. These
tests fork for real and check the outcome, and the kernel's view of the locks (/proc/locks).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest
from harness.forks import in_child, locks_held, read_all

from podstore import PodStore, PodStoreError
from podstore.sqlite.connection import JOURNAL_SIZE_LIMIT
from podstore.sqlite.files import wal_size
from podstore.storage.selfcheck import check_store

RES = "vendor.com/gpu"
pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only"),
    pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the kernel's /proc/locks"),
]


def _errors(path: Path) -> list[str]:
    return [f.message for f in check_store(str(path)) if f.severity == "error"]


@pytest.mark.parametrize("child_opens", [False, True], ids=["inherited-store", "open-in-child"])
def test_parent_close_while_child_writes_loses_nothing(tmp_path: Path, child_opens: bool) -> None:
    """The issue's first report: the child inserts 20 pods (each call returns), the parent
    closes meanwhile; every one of the child's pods must be in the store afterwards. The child
    leaves with os._exit, without closing: a returned call is on disk, or it is lost."""
    for attempt in range(3):
        db = tmp_path / f"attempt-{attempt}.db"
        store = PodStore.open(db)
        store.insert("p0", "c", RES, {0: ["d0"]}, b"")
        # Idle connections of other parent threads are open at the fork too.
        workers = [threading.Thread(target=store.pods) for _ in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 1
            try:
                os.close(ready_r)
                target = PodStore.open(db) if child_opens else store
                for i in range(20):
                    target.insert(f"child-{i}", "c", RES, {0: [f"x{i}"]}, b"")
                    if i == 2:
                        os.write(ready_w, b"x")
                    time.sleep(0.005)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"x"
        os.close(ready_r)
        store.close()  # while the child is still writing
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with PodStore.open(db) as again:
            assert again.pods() == {"p0"} | {f"child-{i}" for i in range(20)}, attempt
        assert _errors(db) == []


def test_child_connections_hold_real_locks(db_path: Path) -> None:
    """The kernel's view: a child's connection holds its own SHARED lock on the database (the
    lock that keeps another process's last close from deleting the WAL)."""
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
        assert locks_held(os.getpid(), db_path), "the parent's connection holds no lock"

        def child() -> list[list[object]]:
            store.insert("from-child", "c", RES, None, b"")
            return [list(lock) for lock in locks_held(os.getpid(), db_path)]

        out = in_child(child)
        assert "result" in out, out
        assert out["result"], "the child's connection holds no lock of its own on the file"
        assert store.pods() == {"p", "from-child"}


def test_a_fork_leaves_the_parents_connections_open(db_path: Path) -> None:
    """The parent goes on with the connections it had (its threads' and the idle ones): the
    child closes its inherited copies, which holds no lock of the parent's; the parent's next
    call does not reconnect. Both sides' writes are kept, also after the child's close."""
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
        sessions = store._sessions
        before = sessions.conn()
        other = threading.Thread(target=store.pods)  # leaves an idle connection behind
        other.start()
        other.join()
        idle = list(sessions._idle)
        assert idle

        def child() -> list[str]:
            store.insert("from-child", "c", RES, None, b"")
            store.close()
            return sorted(PodStore.open(db_path).pods())

        out = in_child(child)
        assert out.get("result") == ["from-child", "p"], out
        assert sessions.conn() is before
        assert sessions._idle == idle
        store.insert("after", "c", RES, None, b"")
        assert store.pods() == {"p", "from-child", "after"}
    assert _errors(db_path) == []


def test_child_forked_during_another_threads_transaction_can_write(db_path: Path) -> None:
    """A fork while another thread is inside transaction(): the fork waits for the block to end
    (it was about to), so the child starts with no connection in use and can write at once,
    through the inherited store and through a new open. Before, the child inherited the write
    lock's bookkeeping and got StoreBusyError after the whole busy timeout."""
    store = PodStore.open(db_path, busy_timeout=5)
    store.insert("p0", "c", RES, None, b"")
    inside = threading.Event()

    def transaction() -> None:
        with store.transaction():
            store.insert("tx-pod", "c", RES, {0: ["t"]}, b"")
            inside.set()
            time.sleep(0.5)  # still inside when the main thread forks

    worker = threading.Thread(target=transaction)
    worker.start()
    assert inside.wait(10)

    def child() -> dict[str, object]:
        started = time.monotonic()
        store.insert("child", "c", RES, None, b"")
        with PodStore.open(db_path, busy_timeout=5) as other:
            other.insert("child-open", "c", RES, None, b"")
        return {"took": time.monotonic() - started, "pods": sorted(store.pods())}

    forked_at = time.monotonic()
    out = in_child(child)
    worker.join()
    assert "result" in out, out
    # Far below the 5 s busy timeout the broken child waited out.
    assert out["result"]["took"] < 2.5
    assert out["result"]["pods"] == ["child", "child-open", "p0", "tx-pod"]
    assert time.monotonic() - forked_at < 5
    assert store.pods() == {"p0", "tx-pod", "child", "child-open"}
    store.close()
    assert _errors(db_path) == []


def test_fork_inside_a_transaction_is_refused_in_the_child(db_path: Path) -> None:
    """fork() inside the forking thread's own transaction() block: the child's copy of the
    transaction belongs to the parent. Every use of the store in the child (a call, finishing
    the block, a new open of the same file) raises PodStoreError naming the fork, at once; the
    parent's transaction commits unharmed."""
    store = PodStore.open(db_path, busy_timeout=5)
    store.insert("p0", "c", RES, None, b"")
    block = store.transaction()
    block.__enter__()
    store.insert("in-parent-tx", "c", RES, None, b"")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        import json

        out: dict[str, object] = {}
        started = time.monotonic()
        for name, call in (
            ("insert", lambda: store.insert("child", "c", RES, None, b"")),
            ("read", store.pods),
            ("exit", lambda: block.__exit__(None, None, None)),
            ("open", lambda: PodStore.open(db_path, busy_timeout=5).pods()),
        ):
            try:
                call()
                out[name] = "returned"
            except PodStoreError as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
            except BaseException as exc:
                out[name] = f"unexpected {type(exc).__name__}: {exc}"
        out["took"] = time.monotonic() - started
        os.write(write_end, json.dumps(out).encode())
        os._exit(0)
    os.close(write_end)
    import json

    out = json.loads(read_all(read_end, pid, 60))
    block.__exit__(None, None, None)
    for name in ("insert", "read", "exit", "open"):
        assert str(out[name]).startswith("PodStoreError"), out
        assert "fork" in str(out[name]), out
    assert float(out["took"]) < 2.5  # no busy timeout waited out
    assert store.pods() == {"p0", "in-parent-tx"}
    store.insert("after", "c", RES, None, b"")
    store.close()
    with PodStore.open(db_path) as again:
        assert again.pods() == {"p0", "in-parent-tx", "after"}
    assert _errors(db_path) == []


def test_child_forked_while_a_reader_holds_a_snapshot_keeps_the_wal_bounded(
    db_path: Path,
) -> None:
    """A parent thread holds a reader() snapshot across the fork; the child writes. While the
    parent's reader really holds its snapshot the WAL may grow (docs/reliability.md); once it
    is released, the child's WAL must be back under journal_size_limit within a few commits,
    and stay there through 3,000 inserts. Before, the child's copy of the reader's read mark
    pinned the log for ever (179 MB)."""
    store = PodStore.open(db_path)
    for i in range(50):
        store.insert(f"pre-{i}", "c", RES, {0: [f"d{i}"]}, b"")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.reader() as reader:
            assert list(reader.stream("SELECT count(*) FROM allocations")) == [(50,)]
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    to_parent_r, to_parent_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        import json

        try:
            os.close(to_parent_r)
            os.close(to_child_w)
            sizes: list[int] = []
            for i in range(3000):
                store.insert(f"pod-{i % 300}", "c", RES, {0: [f"G{i}", f"H{i}"]}, b"")
                sizes.append(wal_size(str(db_path)))
                if i == 299:  # the reader goes away after 300 inserts
                    os.write(to_parent_w, b"release")
                    assert os.read(to_child_r, 8) == b"released"
            out = {"pinned": max(sizes[:300]), "after": max(sizes[303:]), "final": sizes[-1]}
        except BaseException as exc:
            out = {"raised": f"{type(exc).__name__}: {exc}"}
        os.write(to_parent_w, json.dumps(out).encode())
        os._exit(0)
    os.close(to_parent_w)
    os.close(to_child_r)
    assert os.read(to_parent_r, 7) == b"release"
    release.set()
    holder.join()
    os.write(to_child_w, b"released")
    os.close(to_child_w)
    import json

    out = json.loads(read_all(to_parent_r, pid, 300))
    assert "raised" not in out, out
    assert out["after"] <= JOURNAL_SIZE_LIMIT, out
    assert out["final"] <= JOURNAL_SIZE_LIMIT, out
    store.close()
    assert _errors(db_path) == []


def test_reader_opened_before_fork_is_refused_in_the_child(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p", "c", RES, None, b"")
        with store.reader() as reader:
            assert list(reader.stream("SELECT count(*) FROM pods")) == [(1,)]

            def child() -> str:
                try:
                    list(reader.stream("SELECT count(*) FROM pods"))
                except PodStoreError as exc:
                    return f"{type(exc).__name__}: {exc}"
                return "returned"

            out = in_child(child)
            assert str(out.get("result", "")).startswith("PodStoreError"), out
            assert "fork" in out["result"]
            # the parent's reader is untouched
            assert list(reader.stream("SELECT count(*) FROM pods")) == [(1,)]


def test_a_second_open_in_the_same_process_keeps_the_process_locks(db_path: Path) -> None:
    """Opening a second PodStore on a file this process already has open must not drop the
    first one's POSIX locks: closing any descriptor of a file releases every lock the process
    holds on it, so a raw read of the file at open (the structural check) cost the first
    store its SHARED lock, and another process's last close could then delete its WAL."""
    first = PodStore.open(db_path)
    first.insert("p", "c", RES, None, b"")
    first.close()  # a clean close: the next opens take the structural check
    first = PodStore.open(db_path)
    assert first.wait_verified(30)
    first.pods()
    assert locks_held(os.getpid(), db_path)
    second = PodStore.open(db_path)
    second.pods()
    assert locks_held(os.getpid(), db_path), "the second open dropped the process's locks"
    second.close()
    assert locks_held(os.getpid(), db_path), "closing the second store dropped the first's"
    first.close()


_SECOND_OPEN_THEN_KILLED = r"""
import os, signal, sys
from podstore import PodStore
db, ready, go = sys.argv[1], sys.argv[2], sys.argv[3]
with PodStore.open(db) as setup:
    setup.insert("before", "c", "r", None, b"")
first = PodStore.open(db)  # a clean close before: the structural check
first.wait_verified(30)
first.pods()
second = PodStore.open(db)  # the structural check again, while first has the file open
second.pods()
open(ready, "w").close()
while not os.path.exists(go):
    pass
first.insert("after", "c", "r", None, b"")  # returned: must be on disk
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_write_after_a_second_open_survives_another_process_closing(tmp_path: Path) -> None:
    """The same as above, by its consequence: process A opens the store twice, another process
    opens and closes it, A inserts and is killed. The insert returned, so it must be there."""
    db, ready, go = tmp_path / "s.db", tmp_path / "ready", tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SECOND_OPEN_THEN_KILLED, str(db), str(ready), str(go)]
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    # Another process comes and goes: its close is the last one SQLite's locks show.
    subprocess.run(
        [sys.executable, "-c", "import sys, podstore; podstore.PodStore.open(sys.argv[1]).close()",
         str(db)],
        check=True,
        timeout=60,
    )  # fmt: skip
    go.touch()
    assert proc.wait(60) == -signal.SIGKILL
    with PodStore.open(db) as store:
        assert store.pods() == {"before", "after"}
