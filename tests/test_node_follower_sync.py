"""A follower's CPU, memory and DRA syncs (storage/node/sync.py: ``FileSync``, which skips a
rewrite of the bytes its last sync read while the store still holds them) write exactly what
a fresh import of the same file writes, whatever was written between them.

Every scenario runs twice on real store files: once through one long-lived PodStore and the
follower's sync objects (``watch --kubelet-dir``'s path), and once with a fresh PodStore and
``import_node_checkpoint`` for every sync. Other writes between syncs — another process, a
second PodStore, ``set_*_state``, ``import_node``, ``prune_history``, a sync that fails in its
transaction, a ``transaction()`` block that raises, a migration down and up,
``reset_identity``, a copy of the store restored over it — are made the same way in both.
After every step both stores must hold the same: each kind's state and checkpoint bytes, the
whole history (seq, op, key, payload, released devices), ``podstore verify``'s findings (none:
``node_items`` agrees with the rows) and an intact chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import tinyfs

from podstore import (
    AsyncPodStore,
    PodStore,
    StoreBusyError,
    StoreFullError,
    aio_process,
    check_store,
)
from podstore.checkpoint import (
    FILE_NAMES,
    CPUManagerState,
    DRAClaim,
    DRADevice,
    DRAState,
    MemoryBlock,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
)
from podstore.storage.node import codec, cpu, dra, memory
from podstore.storage.node import sync as node_sync
from podstore.storage.node.items import Part
from podstore.store import sessions_of

KINDS = ("cpu", "memory", "dra")
PARTS: dict[str, Part] = {"cpu": cpu.PART, "memory": memory.PART, "dra": dra.PART}
State = CPUManagerState | MemoryManagerState | DRAState
GIB = 1 << 30


def _uid(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-{i:012x}"


# ---- states: random ones, each a few changes away from the one before ---------------------------


def _cpu(rng: random.Random, pods: dict[str, dict[str, frozenset[int]]], policy: str) -> State:
    shared = frozenset(range(rng.randrange(2, 5)))
    own = {p: frozenset().union(*c.values()) for p, c in pods.items() if c and rng.random() < 0.5}
    return CPUManagerState(policy, shared, {p: dict(c) for p, c in pods.items()}, own)


def _cpu_states(rng: random.Random, n: int) -> list[State]:
    pods: dict[str, dict[str, frozenset[int]]] = {
        _uid(i): {"main": frozenset({8 + 4 * i}), "side": frozenset({9 + 4 * i})} for i in range(8)
    }
    out = [_cpu(random.Random(0), pods, "static")]
    for step in range(n - 1):
        for _ in range(rng.randrange(1, 4)):
            uid = _uid(rng.randrange(12))
            containers = pods.setdefault(uid, {})
            name = rng.choice(["main", "side", "init"])
            if name in containers and rng.random() < 0.4:
                del containers[name]
            else:
                # Each pod's CPUs from its own four: no CPU held by two pods.
                n = int(uid[:8], 16)
                containers[name] = frozenset(rng.sample(range(8 + 4 * n, 12 + 4 * n), 2))
            if not containers and rng.random() < 0.5:
                del pods[uid]
        out.append(_cpu(random.Random(step), pods, "static" if rng.random() < 0.9 else "none"))
    return out


def _blocks(rng: random.Random) -> list[MemoryBlock]:
    return [
        MemoryBlock(rng.sample([0, 1], rng.randrange(1, 3)), t, rng.randrange(1, 8) * GIB)
        for t in rng.sample(["memory", "hugepages-1Gi", "hugepages-2Mi"], rng.randrange(1, 3))
    ]


def _memory(pods: dict[str, dict[str, list[MemoryBlock]]], assignments: int) -> State:
    table = MemoryTable(64 * GIB, GIB, 63 * GIB, assignments * GIB, (63 - assignments) * GIB)
    machine: dict[int, NUMANodeState | None] = {
        n: NUMANodeState(assignments, {"memory": table}, [n]) for n in (0, 1)
    }
    entries: dict[str, dict[str, list[MemoryBlock] | None] | None] = {
        p: {
            c: [MemoryBlock(list(b.numa_affinity or []), b.type, b.size) for b in blocks]
            for c, blocks in cs.items()
        }
        for p, cs in pods.items()
    }
    return MemoryManagerState("Static", machine, entries, {})


def _memory_states(rng: random.Random, n: int) -> list[State]:
    seed = random.Random(1)
    pods = {_uid(i): {"main": _blocks(seed), "side": _blocks(seed)} for i in range(6)}
    out = [_memory(pods, 6)]
    for _ in range(n - 1):
        for _ in range(rng.randrange(1, 4)):
            uid = _uid(rng.randrange(9))
            containers = pods.setdefault(uid, {})
            name = rng.choice(["main", "side"])
            roll = rng.random()
            if name in containers and roll < 0.3:
                del containers[name]
            elif name in containers and roll < 0.6:
                # The same blocks listed in another order: no change, no event.
                rng.shuffle(containers[name])
                for b in containers[name]:
                    if b.numa_affinity:
                        rng.shuffle(b.numa_affinity)
            else:
                containers[name] = _blocks(rng)
        out.append(_memory(pods, rng.randrange(4, 9)))
    return out


def _dra(claims: dict[str, tuple[frozenset[str], list[tuple[str, str]]]]) -> State:
    return DRAState(
        [
            DRAClaim(
                uid,
                f"claim-{uid[:8]}",
                "default",
                pods,
                {
                    "gpu.example.com": [
                        DRADevice(pool, dev, ["gpus"], [f"cdi/{dev}"]) for pool, dev in devs
                    ]
                },
            )
            for uid, (pods, devs) in claims.items()
        ]
    )


def _dra_states(rng: random.Random, n: int) -> list[State]:
    claims = {
        _uid(100 + i): (
            frozenset({_uid(i)}),
            [("node-1", f"gpu-{_uid(100 + i)[:8]}-0"), ("node-1", f"gpu-{_uid(100 + i)[:8]}-1")],
        )
        for i in range(6)
    }
    out = [_dra(claims)]
    for _ in range(n - 1):
        for _ in range(rng.randrange(1, 3)):
            uid = _uid(100 + rng.randrange(9))
            roll = rng.random()
            if uid in claims and roll < 0.25:
                del claims[uid]
            elif uid in claims and roll < 0.5:
                pods, devs = claims[uid]
                claims[uid] = (pods, devs[::-1])  # reordered only: no change
            elif uid in claims and roll < 0.75:
                pods, devs = claims[uid]
                claims[uid] = (pods | {_uid(rng.randrange(20))}, devs[:1])
            else:
                claims[uid] = (
                    frozenset({_uid(rng.randrange(20))}),
                    [("node-1", f"gpu-{uid[:8]}-{rng.randrange(4)}")],
                )
        out.append(_dra(claims))
    return out


def states(kind: str, n: int, seed: int = 7) -> list[State]:
    rng = random.Random(f"{kind}-{seed}")
    return {"cpu": _cpu_states, "memory": _memory_states, "dra": _dra_states}[kind](rng, n)


def file_bytes(kind: str, state: State) -> bytes:
    if isinstance(state, CPUManagerState):
        return dumps_cpu_state(state)
    if isinstance(state, MemoryManagerState):
        return dumps_memory_state(state)
    assert isinstance(state, DRAState)
    return dumps_dra_state(state)


def set_state(store: PodStore, kind: str, state: State) -> None:
    if isinstance(state, CPUManagerState):
        store.set_cpu_state(state)
    elif isinstance(state, MemoryManagerState):
        store.set_memory_state(state)
    else:
        assert isinstance(state, DRAState)
        store.set_dra_state(state)


# ---- two stores, one long-lived, one opened afresh for every sync ----------------------------


@dataclass
class Run:
    """One of the two runs of a scenario: its store file, and how it syncs (``follows``:
    one long-lived store and a follower's sync object per kind)."""

    dir: Path
    follows: bool
    store: PodStore | None = None
    #: where its checkpoint files are written (default: beside the store)
    files: Path | None = None
    syncs: dict[str, node_sync.FileSync] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.dir / "store.db"

    @contextlib.contextmanager
    def syncing(self) -> Iterator[PodStore]:
        if self.follows:
            if self.store is None:
                self.store = PodStore.open(self.db, verify="off")
            yield self.store
        else:
            with PodStore.open(self.db, verify="off") as store:
                yield store

    def sync_file(self, kind: str, state: State) -> None:
        path = (self.files or self.dir) / f"{kind}_state"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(file_bytes(kind, state))
        os.replace(tmp, path)
        with self.syncing() as store:
            if self.follows:
                follower = self.syncs.setdefault(kind, node_sync.FileSync(kind, str(path)))
                node_sync.sync_file(sessions_of(store), follower)
            else:
                store.import_node_checkpoint(path, kind=kind)

    def set(self, kind: str, state: State) -> None:
        with self.syncing() as store:
            set_state(store, kind, state)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def picture(db: Path) -> dict[str, Any]:
    """Everything a sync can have changed, as a fresh read-only open sees it."""
    with PodStore.open(db, readonly=True, verify="off") as store:
        out: dict[str, Any] = {
            "cpu": store.cpu_state(),
            "memory": store.memory_state(),
            "dra": store.dra_state(),
            "history": [
                (
                    e.seq,
                    e.op,
                    e.pod_uid,
                    e.container_name,
                    e.resource_name,
                    e.device_ids,
                    e.released,
                )
                for e in store.history()
            ],
            "chain": store.verify_history().ok,
        }
        for kind in KINDS:
            if out[kind] is not None:
                out[f"{kind}-bytes"] = store.node_checkpoint_bytes(kind)
    out["verify"] = check_store(db)
    return out


def stored(db: Path, kind: str) -> dict[Any, tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        items = PARTS[kind].stored(conn)
    finally:
        conn.close()
    return {k: (i.payload, i.canon, i.devices) for k, i in items.items()}


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[tuple[Run, Run]]:
    pair = (Run(tmp_path / "follows", True), Run(tmp_path / "fresh", False))
    for run in pair:
        run.dir.mkdir()
    yield pair
    for run in pair:
        run.close()


Step = Callable[[Run], None]


def play(runs: tuple[Run, Run], kind: str, steps: list[Step]) -> None:
    """Each step on both runs, then the same picture."""
    follows, fresh = runs
    for i, step in enumerate(steps):
        for run in runs:
            step(run)
        a, b = picture(follows.db), picture(fresh.db)
        assert a["verify"] == [] and a["chain"], f"step {i}"
        assert a == b, f"step {i}: the long-lived store differs from the fresh one"


def sync(kind: str, state: State, *, by_file: bool = True) -> Step:
    def step(run: Run) -> None:
        if by_file:
            run.sync_file(kind, state)
        else:
            run.set(kind, state)

    return step


# ---- repeated syncs ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_repeated_syncs_write_what_fresh_stores_write(kind: str, runs: tuple[Run, Run]) -> None:
    seq = states(kind, 40)
    steps = [sync(kind, s, by_file=i % 3 != 2) for i, s in enumerate(seq)]
    # Back and forth between two states, as the benchmark does.
    steps += [sync(kind, seq[-1 - (i % 2)]) for i in range(6)]
    # The same bytes again, after a set_state of them and after a sync of them.
    steps += [sync(kind, seq[-1], by_file=False), sync(kind, seq[-1]), sync(kind, seq[-1])]
    play(runs, kind, steps)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_bytes_again_are_skipped_without_the_write_lock(kind: str, tmp_path: Path) -> None:
    """A rewrite of the bytes the last sync read, the store unchanged since, needs no write
    transaction: it succeeds while another connection holds the write lock; a change does not."""
    s = states(kind, 2)
    path, db = tmp_path / "state", tmp_path / "s.db"
    path.write_bytes(file_bytes(kind, s[0]))
    with PodStore.open(db, verify="off", busy_timeout=0.05) as store:
        follower = node_sync.FileSync(kind, str(path))
        first = node_sync.sync_file(sessions_of(store), follower)
        assert first.written > 0
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            again = node_sync.sync_file(sessions_of(store), follower)
            assert again == dataclasses.replace(first, written=0, deleted=0, form_changed=False)
            path.write_bytes(file_bytes(kind, s[1]))
            with pytest.raises(StoreBusyError):
                node_sync.sync_file(sessions_of(store), follower)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert node_sync.sync_file(sessions_of(store), follower).changed


# ---- writes the follower never saw ------------------------------------------------------------

FOREIGN = r"""
import sys
from podstore import PodStore
db, path, kind = sys.argv[1:4]
with PodStore.open(db, verify="off") as store:
    store.import_node_checkpoint(path, kind=kind)
"""


def in_another_process(kind: str, state: State) -> Step:
    def step(run: Run) -> None:
        path = run.dir / f"foreign_{kind}"
        path.write_bytes(file_bytes(kind, state))
        subprocess.run(
            [sys.executable, "-c", FOREIGN, str(run.db), str(path), kind],
            check=True,
            env=os.environ,
            timeout=60,
        )

    return step


def with_a_second_store(kind: str, state: State) -> Step:
    def step(run: Run) -> None:
        with PodStore.open(run.db, verify="off") as other:
            set_state(other, kind, state)

    return step


def with_import_node(kind: str, state: State) -> Step:
    def step(run: Run) -> None:
        kubelet = run.dir / "kubelet"
        kubelet.mkdir(exist_ok=True)
        (kubelet / FILE_NAMES[kind]).write_bytes(file_bytes(kind, state))
        with run.syncing() as store:
            store.import_node(kubelet, sysfs=run.dir / "no-sysfs", pod_logs=run.dir / "no-logs")

    return step


def a_device_write(tag: str) -> Step:
    def step(run: Run) -> None:
        with PodStore.open(run.db, verify="off") as other:
            other.insert(f"dev-{tag}", "c", "example.com/gpu", {0: [f"gpu-{tag}"]}, None)

    return step


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "writer", [in_another_process, with_a_second_store, with_import_node], ids=lambda w: w.__name__
)
def test_a_write_elsewhere_is_seen(
    kind: str, writer: Callable[[str, State], Step], runs: tuple[Run, Run]
) -> None:
    s = states(kind, 6)
    steps = [
        sync(kind, s[0]),
        sync(kind, s[1]),
        writer(kind, s[4]),
        sync(kind, s[1]),  # the bytes the follower read last: all of the other write is undone
        a_device_write("a"),
        writer(kind, s[5]),
        a_device_write("b"),
        sync(kind, s[2]),
        writer(kind, s[2]),  # the same state: no event
        sync(kind, s[3]),
    ]
    play(runs, kind, steps)


@pytest.mark.parametrize("kind", KINDS)
def test_set_state_on_the_same_store_is_seen(kind: str, runs: tuple[Run, Run]) -> None:
    s = states(kind, 5)
    play(
        runs,
        kind,
        [sync(kind, s[0]), sync(kind, s[1], by_file=False), sync(kind, s[4]), sync(kind, s[1])],
    )


def prune_all(run: Run) -> None:
    with PodStore.open(run.db, verify="off") as other:
        other.prune_history(datetime.now(UTC) + timedelta(days=1))


def _without_one_assignment(state: State) -> State:
    if isinstance(state, CPUManagerState):
        pod = sorted(state.entries)[0]
        entries = {**state.entries, pod: dict(list(state.entries[pod].items())[1:])}
        return CPUManagerState(
            state.policy_name, state.default_cpu_set, entries, dict(state.pod_entries)
        )
    if isinstance(state, MemoryManagerState):
        assert state.entries is not None
        pod = sorted(state.entries)[0]
        containers = state.entries[pod] or {}
        entries = {**state.entries, pod: dict(list(containers.items())[1:])}
        return MemoryManagerState(state.policy_name, state.machine_state, entries, {})
    assert isinstance(state, DRAState) and state.claims
    return DRAState(state.claims[1:])


def _with_one_more(kind: str, state: State) -> State:
    """``state`` and one new assignment (its event the sync's last: a set, kept by prune)."""
    if isinstance(state, CPUManagerState):
        entries = {**state.entries, _uid(999): {"late": frozenset({63})}}
        return CPUManagerState(
            state.policy_name, state.default_cpu_set, entries, dict(state.pod_entries)
        )
    if isinstance(state, MemoryManagerState):
        assert state.entries is not None
        blocks: dict[str, list[MemoryBlock] | None] = {"late": [MemoryBlock([0], "memory", GIB)]}
        entries = {**state.entries, _uid(999): blocks}
        return MemoryManagerState(state.policy_name, state.machine_state, entries, {})
    assert isinstance(state, DRAState) and state.claims is not None
    late = DRAClaim(_uid(999), "late", "default", frozenset({_uid(1)}), {"x.example.com": []})
    return DRAState([*state.claims, late])


@pytest.mark.parametrize("kind", KINDS)
def test_prune_history_removing_events_after_the_mark_is_seen(
    kind: str, runs: tuple[Run, Run]
) -> None:
    s = states(kind, 4)
    last = _with_one_more(kind, s[1])
    fewer = _without_one_assignment(last)
    steps = [
        sync(kind, s[0]),
        sync(kind, last),
        # Elsewhere: an assignment goes (its delete event), a device write follows, and prune
        # removes every event of the gone assignment, the delete too: no event of the kind
        # is left after the mark, yet the kind changed.
        with_a_second_store(kind, fewer),
        a_device_write("a"),
        prune_all,
        sync(kind, last),
        prune_all,  # the mark's own event may go now
        sync(kind, s[2]),
        sync(kind, s[3]),
    ]
    play(runs, kind, steps)


@pytest.mark.parametrize("kind", KINDS)
def test_a_transaction_block_that_raises_is_undone_by_the_next_sync(
    kind: str, runs: tuple[Run, Run]
) -> None:
    s = states(kind, 4)

    def rolled_back(run: Run) -> None:
        with run.syncing() as store, contextlib.suppress(RuntimeError), store.transaction():
            set_state(store, kind, s[3])
            store.insert("txn", "c", "example.com/gpu", {0: ["g"]}, None)
            raise RuntimeError("the caller's block fails")

    def committed(run: Run) -> None:
        with run.syncing() as store, store.transaction():
            set_state(store, kind, s[2])
            store.insert("txn", "c", "example.com/gpu", {0: ["g"]}, None)

    steps = [
        sync(kind, s[0]),
        sync(kind, s[1]),
        rolled_back,
        sync(kind, s[3]),  # the block's change was rolled back: all of it is written now
        sync(kind, s[1]),
        committed,
        sync(kind, s[2]),
        sync(kind, s[1]),
    ]
    play(runs, kind, steps)


@pytest.mark.parametrize("kind", KINDS)
def test_reset_identity_and_a_restored_copy_are_seen(kind: str, runs: tuple[Run, Run]) -> None:
    s = states(kind, 5)

    def copy(run: Run) -> None:
        src = sqlite3.connect(run.db)
        dst = sqlite3.connect(run.dir / "copy.db")
        with dst:
            src.backup(dst)
        src.close()
        dst.close()

    def restore(run: Run) -> None:
        src = sqlite3.connect(run.dir / "copy.db")
        dst = sqlite3.connect(run.db, timeout=30)
        src.backup(dst)
        src.close()
        dst.close()

    def reset(run: Run) -> None:
        with run.syncing() as store:
            store.reset_identity()

    steps = [
        sync(kind, s[0]),
        copy,
        sync(kind, s[1]),
        restore,  # the store is back at s[0]; the follower read s[1] last
        sync(kind, s[1]),
        reset,
        sync(kind, s[2]),
        sync(kind, s[3]),
    ]
    # The history differs in hashes and identity only; the picture leaves both out.
    play(runs, kind, steps)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cookie", ["bumped", "kept"])
def test_a_restored_copy_that_went_on_to_the_same_seq_is_seen(
    kind: str, cookie: str, runs: tuple[Run, Run]
) -> None:
    """``kept``: the restore leaves the schema cookie as it was (as copying the file's bytes
    over it does; the backup API bumps it), so only the hash at the mark's seq tells."""
    s = states(kind, 3)
    more = _with_one_more(kind, s[1])

    def copy(run: Run) -> None:
        src, dst = sqlite3.connect(run.db), sqlite3.connect(run.dir / "copy.db")
        with dst:
            src.backup(dst)
        src.close()
        dst.close()

    def restore(run: Run) -> None:
        src, dst = sqlite3.connect(run.dir / "copy.db"), sqlite3.connect(run.db, timeout=30)
        (before,) = dst.execute("PRAGMA schema_version").fetchone()
        src.backup(dst)
        if cookie == "kept":
            dst.execute(f"PRAGMA schema_version = {int(before)}")
        (after,) = dst.execute("PRAGMA schema_version").fetchone()
        assert (after == before) == (cookie == "kept")
        src.close()
        dst.close()

    steps = [
        sync(kind, s[0]),
        sync(kind, s[1]),
        copy,
        sync(kind, more),  # one event: the mark is at seq N + 1
        restore,  # back at seq N
        a_device_write("a"),  # seq N + 1 again, another event
        sync(kind, more),
        sync(kind, s[2]),
    ]
    play(runs, kind, steps)


CLI = "from podstore.cli import main; main()"


@pytest.mark.parametrize("kind", KINDS)
def test_a_migration_down_and_up_is_seen(kind: str, runs: tuple[Run, Run]) -> None:
    s = states(kind, 3)

    def down_and_up(run: Run) -> None:
        for args in (["downgrade", "0006", "--yes"], ["upgrade"]):
            subprocess.run(
                [sys.executable, "-c", CLI, "--db", str(run.db), "migrate", *args],
                check=True,
                env=os.environ,
                capture_output=True,
                timeout=120,
            )

    steps = [
        sync(kind, s[0]),
        sync(kind, s[1]),
        a_device_write("a"),
        # No change: the mark moves to the device event, which the downgrade keeps.
        sync(kind, s[1]),
        down_and_up,
        sync(kind, s[1]),  # the tables came back empty, the mark's event did not go
        sync(kind, s[2]),
    ]
    play(runs, kind, steps)


# ---- a sync that fails inside its transaction ------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    with tinyfs.tiny_fs(tmp_path / "tinyfs") as mnt:
        yield mnt


def test_a_sync_that_fails_in_its_transaction_is_made_whole_by_the_next(
    tiny: Path, tmp_path: Path
) -> None:
    kind = "cpu"
    s = states(kind, 3)
    big = CPUManagerState(
        "static",
        frozenset({0, 1}),
        {_uid(i): {f"c{k}": frozenset({k, i % 64}) for k in range(40)} for i in range(300)},
    )
    follows = Run(tiny, True, files=tmp_path)
    fresh = Run(tmp_path / "fresh", False)
    fresh.dir.mkdir()
    try:
        for run in (follows, fresh):
            run.sync_file(kind, s[0])
            run.sync_file(kind, s[1])
        ballast = tiny / "ballast"
        tinyfs.fill(ballast)
        for _ in range(2):
            with pytest.raises(StoreFullError):
                follows.sync_file(kind, big)
        ballast.unlink()
        for state in (s[1], s[2], s[1]):
            for run in (follows, fresh):
                run.sync_file(kind, state)
            a, b = picture(follows.db), picture(fresh.db)
            assert a["verify"] == [] and a == b
    finally:
        follows.close()


# ---- threads of one store --------------------------------------------------------------------


def test_threads_syncing_through_one_store_keep_history_and_tables_agreeing(
    tmp_path: Path,
) -> None:
    kind = "cpu"
    seq = states(kind, 12)
    run = Run(tmp_path, True)
    errors: list[BaseException] = []

    def syncer(t: int) -> None:
        rng = random.Random(t)
        try:
            with run.syncing() as store:
                for i in range(40):
                    state = rng.choice(seq)
                    if i % 2:
                        set_state(store, kind, state)
                    else:
                        path = tmp_path / f"{kind}_state_{t}"
                        path.write_bytes(file_bytes(kind, state))
                        store.import_node_checkpoint(path, kind=kind)
        except BaseException as exc:
            errors.append(exc)

    def devices() -> None:
        try:
            with run.syncing() as store:
                for i in range(20):
                    store.insert(f"dev-{i}", "c", "example.com/gpu", {0: [f"gpu-{i}"]}, None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=syncer, args=(t,)) for t in range(6)]
    threads.append(threading.Thread(target=devices))
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        for final in (None, seq[-1]):
            if final is not None:
                run.sync_file(kind, final)
            a = picture(run.db)
            assert a["verify"] == [] and a["chain"]
            assert run.store is not None
            ours = [e for e in run.store.history() if e.op.startswith(f"{kind}-")]
            now = stored(run.db, kind)
            assert codec.replay(ours) == {k: v[0] for k, v in now.items()}
        fresh = Run(tmp_path / "fresh", False)
        fresh.dir.mkdir()
        fresh.sync_file(kind, seq[-1])
        assert picture(fresh.db)[f"{kind}-bytes"] == a[f"{kind}-bytes"]
    finally:
        run.close()


# ---- AsyncPodStore: its worker process beside its own thread side -----------------------------


def test_an_async_stores_worker_process_write_is_seen_by_its_thread_side(tmp_path: Path) -> None:
    """``AsyncPodStore`` runs a large file's import in its worker process (a PodStore of its
    own on the same file) and small calls on ``astore.sync``, its thread side."""
    s = states("cpu", 3)
    big = CPUManagerState(
        "static", frozenset({0, 1}), {_uid(i): {"main": frozenset({8 + i})} for i in range(4000)}
    )
    big_file = tmp_path / "big_cpu_state"
    big_file.write_bytes(dumps_cpu_state(big))
    assert big_file.stat().st_size > aio_process.SMALL_FILE
    (tmp_path / "async").mkdir()
    fresh = Run(tmp_path / "fresh", False)
    fresh.dir.mkdir()

    async def main() -> None:
        async with await AsyncPodStore.open(tmp_path / "async" / "store.db") as astore:
            here = astore.sync
            here.set_cpu_state(s[0])
            here.set_cpu_state(s[1])
            await astore.import_node_checkpoint(big_file, kind="cpu")
            assert astore._process.pid is not None  # it ran in the worker
            here.set_cpu_state(s[1])  # what the thread side wrote last: the big state goes
            here.set_cpu_state(s[2])

    asyncio.run(main())
    for state in (s[0], s[1]):
        fresh.set("cpu", state)
    with PodStore.open(fresh.db, verify="off") as other:
        other.import_node_checkpoint(big_file, kind="cpu")
    for state in (s[1], s[2]):
        fresh.set("cpu", state)
    a, b = picture(tmp_path / "async" / "store.db"), picture(fresh.db)
    assert a["verify"] == [] and a == b
