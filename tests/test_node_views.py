"""The node views over a real store: each view the migrations created is the one
``storage/sql/node_views.py`` documents, and ``v_container_numa``'s ``aligned`` follows its
rule for every combination of known NUMA sets — devices, CPUs and memory each unknown, on node
0, on node 1 or on both (the rule, in Python, is the expectation; the store is not read for
it)."""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import pytest

from podstore import PodStore
from podstore.checkpoint import CPUManagerState, MemoryBlock, MemoryManagerState, NumaTopology
from podstore.storage.sql import views
from podstore.storage.sql.node_views import NODE_VIEWS

SETS: list[tuple[int, ...] | None] = [None, (0,), (1,), (0, 1)]
CASES = list(itertools.product(SETS, repeat=3))


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def test_the_live_views_are_the_documented_ones(tmp_path: Path) -> None:
    """The migrations freeze their own copy of each view; a fresh store's views and trigger
    must be exactly the SQL of storage/sql/ (what docs/sql.md and the tests read)."""
    db = tmp_path / "s.db"
    PodStore.open(db).close()
    conn = sqlite3.connect(db)
    try:
        live = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type IN "
                                 "('view', 'trigger')").fetchall())  # fmt: skip
    finally:
        conn.close()
    for name, create in NODE_VIEWS + views.VIEWS + views.TRIGGERS:
        assert _normal(live[name]) == _normal(create), name


def _expected(dev: tuple[int, ...] | None, cpu: tuple[int, ...] | None,
              mem: tuple[int, ...] | None) -> int | None:  # fmt: skip
    known = [s for s in (dev, cpu, mem) if s is not None]
    if len(known) < 2:
        return None
    return int(all(s == known[0] for s in known))


@pytest.fixture(scope="module")
def store_of_every_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One container per case: pod ``p{i}``, container ``c``; CPUs even on NUMA node 0, odd
    on node 1."""
    db = tmp_path_factory.mktemp("views") / "s.db"
    cpus: dict[str, dict[str, frozenset[int]]] = {}
    memory: dict[str, dict[str, list[MemoryBlock] | None]] = {}
    with PodStore.open(db) as store, store.transaction():
        store.set_numa_topology(
            NumaTopology({0: frozenset(range(0, 256, 2)), 1: frozenset(range(1, 256, 2))})
        )
        for i, (dev, cpu, mem) in enumerate(CASES):
            pod = f"p{i:02d}"
            # A device entry (its NUMA -1 is no information) keeps the container listed.
            devices = {n: [f"d{i}-{n}"] for n in dev} if dev else {-1: [f"d{i}"]}
            store.insert(pod, "c", "example.com/gpu", devices, None)
            if cpu:
                cpus[pod] = {"c": frozenset(2 * i + n for n in cpu)}
            if mem:
                memory[pod] = {"c": [MemoryBlock(list(mem), "memory", 1 << 30)]}
        store.set_cpu_state(CPUManagerState("static", frozenset({254, 255}), entries=cpus))
        store.set_memory_state(MemoryManagerState("Static", entries=memory))
    return db


def test_alignment_follows_every_known_set(store_of_every_case: Path) -> None:
    with PodStore.open(store_of_every_case, readonly=True) as store:
        rows = store.query(
            "SELECT pod_uid, device_numa, cpu_numa, memory_numa, aligned FROM v_container_numa "
            "ORDER BY pod_uid"
        ).rows
        misaligned = [r[0] for r in store.query("SELECT pod_uid FROM v_numa_misaligned").rows]
    assert len(rows) == len(CASES)
    for (pod, dev, cpu, mem, aligned), case in zip(rows, CASES, strict=True):
        shown = tuple(None if s is None else str(list(s)).replace(" ", "") for s in case)
        assert (dev, cpu, mem) == shown, pod
        assert aligned == _expected(*case), (pod, case)
    assert misaligned == [f"p{i:02d}" for i, c in enumerate(CASES) if _expected(*c) == 0]
