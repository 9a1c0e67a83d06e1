"""kill -9 of ``podstore watch --kubelet-dir`` at random moments: each manager's file is
applied wholly or not at all, the history never misses or repeats a change, and the store
always passes its self-check.

Each round starts the real command (forked from a warm fork server,
tests/harness/watch_follower.py) on a kubelet directory holding the CPU, memory and DRA
managers' files, rewrites some of them by rename zero to three times at random moments —
some while the start-up syncs run, some while event-driven syncs run — and SIGKILLs the
follower. Rounds take turns in when the kill lands, each set by what the test sees rather than by
how long the machine takes: after a random delay (anywhere, mid-sync included); once the store
holds every file on disk (caught up); or with the follower stopped (SIGSTOP) and a file
rewritten under it (behind). Then, on the store as the kill left it:

- every kind's stored state is one of the files written for it (this round or before): never
  a mixture;
- for every item, the latest event of its key says what the store holds (a set with the
  item's payload; a delete, or no event, for an item not held), and no key has two
  consecutive events with the same content — a change lost or applied twice shows here;
- the self-check finds no error and the hash chain verifies.

The next round's start-up syncs catch up from the files; at the end one more sync of each
file changes nothing. PODSTORE_NODE_WATCH_KILLS sets the number of rounds (default 40).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.figures import report
from harness.forkserver import ForkServer
from harness.nodegen import Node, replace_file

from podstore import InvalidInputError, PodStore, SchemaError
from podstore.checkpoint import FILE_NAMES, dumps_cpu_state, dumps_dra_state, dumps_memory_state
from podstore.storage.node import cpu, dra, memory
from podstore.storage.selfcheck import check_connection

ROUNDS = int(os.environ.get("PODSTORE_NODE_WATCH_KILLS", "40"))
#: How long a round waits for the follower to catch up (a follower that never does fails).
CATCH_UP_S = 120.0
WHEN = ("random", "caught-up", "behind")
SEED = int(os.environ.get("PODSTORE_NODE_WATCH_KILL_SEED", "20261204"))
KINDS = ("cpu", "memory", "dra")

# kind → (the state a Node gives, its file's bytes, its items, the store's state)
_Kind = tuple[
    Callable[[Node], Any], Callable[[Any], bytes], Callable[[Any], Any], Callable[[PodStore], Any]
]
KIND: dict[str, _Kind] = {
    "cpu": (Node.cpu, dumps_cpu_state, cpu.wanted, PodStore.cpu_state),
    "memory": (Node.memory, dumps_memory_state, memory.wanted, PodStore.memory_state),
    "dra": (Node.dra, dumps_dra_state, dra.wanted, PodStore.dra_state),
}


def _random_node(rng: random.Random) -> Node:
    pods = rng.randint(1, 24)
    return Node(pods, misaligned={i for i in range(pods) if rng.random() < 0.3})


def _items(kind: str, state: Any) -> dict[Any, str | None]:
    """An item's payload by key (what its events carry); {} for no state."""
    if state is None:
        return {}
    items = KIND[kind][2](state)[0]
    return {k: item.payload for k, item in items.items()}


def _history(db: Path, kind: str) -> dict[tuple[Any, ...], list[tuple[str, str | None]]]:
    """(op, payload) of every event of ``kind``'s items, per key, oldest first."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        out: dict[tuple[Any, ...], list[tuple[str, str | None]]] = {}
        for op, pod, container, resource, payload in conn.execute(
            "SELECT op, pod_uid, container, resource, device_ids FROM allocation_events"
            " WHERE op IN (?, ?) ORDER BY seq",
            (f"{kind}-set", f"{kind}-delete"),
        ):
            out.setdefault((pod, container, resource), []).append((op, payload))
        return out
    finally:
        conn.close()


def _errors(db: Path) -> list[str]:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return [str(f) for f in check_connection(conn) if f.severity == "error"]
    finally:
        conn.close()


def _caught_up(db: Path, kubelet: Path) -> bool:
    """The store exists and holds every kind's file as it is on disk."""
    try:
        store = PodStore.open(db, readonly=True, verify="off")
    except (InvalidInputError, SchemaError):
        return False  # not created yet
    with store:
        return all(
            (state := KIND[kind][3](store)) is not None
            and KIND[kind][1](state) == (kubelet / FILE_NAMES[kind]).read_bytes()
            for kind in KINDS
        )


def _wait_caught_up(db: Path, kubelet: Path) -> None:
    deadline = time.monotonic() + CATCH_UP_S
    while not _caught_up(db, kubelet):
        assert time.monotonic() < deadline, "the follower did not catch up with the files"
        time.sleep(0.01)


def _check(db: Path, kind: str, held: Any, written: list[bytes]) -> None:
    """The store's ``held`` state of ``kind`` is one of the ``written`` files, and its
    history agrees with it, with no change repeated."""
    if held is not None:
        assert KIND[kind][1](held) in written, f"{kind}: the store holds no file written"
    items = _items(kind, held)
    for key, events in _history(db, kind).items():
        for before, after in itertools.pairwise(events):
            assert before != after, f"{kind} {key}: the same change written twice"
        op, payload = events[-1]
        if key in items:
            assert (op, payload) == (f"{kind}-set", items[key]), f"{kind} {key}: event lost"
        else:
            assert op == f"{kind}-delete", f"{kind} {key}: gone without its delete event"
    known = _history(db, kind)
    assert all(key in known for key in items), f"{kind}: an item held without its event"


@pytest.mark.slow
def test_kill9_of_the_whole_node_follower_keeps_each_file_whole_and_the_history_exact(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    kubelet = tmp_path / "kubelet"
    db = tmp_path / "store.db"
    node = _random_node(rng)
    node.write_kubelet_dir(kubelet, KINDS)
    # Every file written for each kind so far (any of them may be what the store holds).
    written = {kind: [KIND[kind][1](KIND[kind][0](node))] for kind in KINDS}
    stats = {"rounds": 0, "kills": 0, "files": 0, "behind_after_kill": 0, "before_schema": 0}
    started = time.monotonic()
    server = ForkServer("watch_follower.py")
    try:
        for round_ in range(ROUNDS):
            when = WHEN[round_ % len(WHEN)]
            stats["rounds"] += 1
            server.send(f"node {db} {kubelet}")
            pid = int(server.until_line("p ")[1].split()[1])
            for _ in range(rng.randint(0, 3)):
                time.sleep(rng.uniform(0, 0.05))
                node = _random_node(rng)
                for kind in rng.sample(KINDS, rng.randint(1, 3)):
                    data = KIND[kind][1](KIND[kind][0](node))
                    replace_file(kubelet / FILE_NAMES[kind], data)
                    written[kind].append(data)
                    stats["files"] += 1
            if when == "random":
                time.sleep(rng.uniform(0, 0.08))
            else:
                _wait_caught_up(db, kubelet)
            if when == "behind":
                # Stopped, it cannot sync the rewrite: the kill leaves the store one file behind.
                os.kill(pid, signal.SIGSTOP)
                kind = rng.choice(KINDS)
                data = KIND[kind][1](KIND[kind][0](_random_node(rng)))
                while data == (kubelet / FILE_NAMES[kind]).read_bytes():
                    data = KIND[kind][1](KIND[kind][0](_random_node(rng)))
                replace_file(kubelet / FILE_NAMES[kind], data)
                written[kind].append(data)
                stats["files"] += 1
            os.kill(pid, signal.SIGKILL)
            code = int(server.until_line(f"x {pid} ")[1].split()[2])
            assert code == -signal.SIGKILL, f"the follower exited by itself ({code})"
            stats["kills"] += 1
            try:
                store = PodStore.open(db, readonly=True, verify="off")
            except (InvalidInputError, SchemaError):
                stats["before_schema"] += 1  # killed while the store was being created
                continue
            with store:
                held = {kind: KIND[kind][3](store) for kind in KINDS}
                assert store.verify_history().ok
            assert _errors(db) == []
            for kind in KINDS:
                _check(db, kind, held[kind], written[kind])
            on_disk = {kind: (kubelet / FILE_NAMES[kind]).read_bytes() for kind in KINDS}
            if any(held[k] is None or KIND[k][1](held[k]) != on_disk[k] for k in KINDS):
                stats["behind_after_kill"] += 1
    finally:
        server.close()
    # The next start catches up with every file, and a second sync changes nothing.
    with PodStore.open(db) as store:
        for kind in KINDS:
            path = kubelet / FILE_NAMES[kind]
            store.import_node_checkpoint(path, kind=kind)
            assert KIND[kind][1](KIND[kind][3](store)) == path.read_bytes()
            assert store.import_node_checkpoint(path, kind=kind).result == "unchanged"
    assert _errors(db) == []
    stats["seconds"] = round(time.monotonic() - started, 1)
    report("watch-node-kill9", seed=SEED, **stats)
    assert stats["kills"] == ROUNDS
    # Kills landed both before and after the syncs caught up (the rounds make sure of both).
    assert 0 < stats["behind_after_kill"] < stats["kills"]
