"""One PodStore shared by threads, and one file shared by processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.refmodel import resp

from podstore import PodDevicesEntry, PodStore

RES = "vendor.com/dev"
THREADS = 8
PER_THREAD = 20


def run_threads(target: Callable[[int], None], count: int = THREADS) -> None:
    """Start ``count`` threads together; re-raise the first error any of them hit."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def wrapper(i: int) -> None:
        try:
            barrier.wait(10)
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrapper, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_eight_threads_insert_and_read_concurrently(store: PodStore) -> None:
    r = resp(envs={"A": "1"})

    def work(i: int) -> None:
        for j in range(PER_THREAD):
            pod = f"t{i}-p{j}"
            store.insert(pod, "c", RES, {i % 2: [f"d{i}-{j}"]}, r)
            # Reads interleaved with other threads' writes see at least this thread's own.
            assert store.has_pod(pod)
            assert store.container_devices(pod, "c", RES) == {f"d{i}-{j}"}
            assert f"d{i}-{j}" in store.devices()[RES]
            if j % 5 == 4:
                store.delete([f"t{i}-p{j - 1}"])
        with store.transaction():
            store.insert(f"t{i}-tx", "c", RES, None, r)
            store.insert(f"t{i}-tx", "d", RES, None, r)

    run_threads(work)
    expected = {f"t{i}-p{j}" for i in range(THREADS) for j in range(PER_THREAD) if j % 5 != 3} | {
        f"t{i}-tx" for i in range(THREADS)
    }
    assert store.pods() == expected
    assert store.size() == len(expected)
    assert store.devices()[RES] == {
        f"d{i}-{j}" for i in range(THREADS) for j in range(PER_THREAD) if j % 5 != 3
    }
    # Each thread's entries keep that thread's insertion order.
    keys = [(e.pod_uid, e.container_name) for e in store.to_checkpoint_data()]
    for i in range(THREADS):
        mine = [k for k in keys if k[0].startswith(f"t{i}-")]
        want = [(f"t{i}-p{j}", "c") for j in range(PER_THREAD) if j % 5 != 3]
        assert mine == [*want, (f"t{i}-tx", "c"), (f"t{i}-tx", "d")]


def test_readers_never_see_half_a_transaction(store: PodStore) -> None:
    stop = threading.Event()

    def work(i: int) -> None:
        if i < 2:
            for j in range(25):
                with store.transaction():
                    store.insert(f"w{i}-{j}", "a", RES, {0: [f"x{i}-{j}"]}, b"")
                    store.insert(f"w{i}-{j}", "b", RES, {0: [f"y{i}-{j}"]}, b"")
                    store.delete([f"w{i}-{j - 1}"])
            if i == 0:
                stop.set()
            return
        while not stop.is_set():
            entries = store.to_checkpoint_data()
            per_pod: dict[str, int] = {}
            for e in entries:
                per_pod[e.pod_uid] = per_pod.get(e.pod_uid, 0) + 1
            # Writer transactions keep exactly one pod each, always with both containers.
            assert all(n == 2 for n in per_pod.values()), per_pod
            assert len(per_pod) <= 2, per_pod

    run_threads(work, count=5)
    assert store.pods() == {"w0-24", "w1-24"}


def test_another_process_sees_committed_data(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p1", "c", RES, {0: ["a"], 1: ["b"]}, resp(envs={"A": "1"}))
        with store.transaction():
            store.insert("p2", "c", RES, {-1: ["z"]}, b"")
        script = (
            "import json, sys\n"
            "from podstore import PodStore\n"
            "with PodStore.open(sys.argv[1]) as s:\n"
            "    print(json.dumps({'pods': sorted(s.pods()),\n"
            "                      'devs': sorted(s.container_devices('p1', 'c', sys.argv[2])),\n"
            "                      'entries': len(s.to_checkpoint_data())}))\n"
            "    s.insert('from-child', 'c', sys.argv[2], {0: ['q']}, b'')\n"
        )
        # The parent still holds its connections open while the child reads and writes.
        out = subprocess.run(
            [sys.executable, "-c", script, str(db_path), RES],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(out.stdout) == {"pods": ["p1", "p2"], "devs": ["a", "b"], "entries": 2}
        assert store.pods() == {"p1", "p2", "from-child"}
        assert store.to_checkpoint_data()[-1] == PodDevicesEntry(
            "from-child", "c", RES, {0: ["q"]}, b""
        )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_a_forked_child_uses_its_own_connection(db_path: Path) -> None:
    with PodStore.open(db_path) as store:
        store.insert("parent", "c", RES, {0: ["a"]}, b"")  # the parent's connection exists
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 3
            try:
                store.insert("child", "c", RES, {0: ["b"]}, b"")
                code = 0 if store.pods() == {"parent", "child"} else 1
            except BaseException:
                code = 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's connection was not disturbed by the child's.
        store.insert("parent2", "c", RES, None, b"")
        assert store.pods() == {"parent", "child", "parent2"}
