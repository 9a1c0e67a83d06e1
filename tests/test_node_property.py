"""Random node states → export → import-node → the same views.

A random state of the whole node — device entries, CPU, memory and DRA managers' states, a
topology, pod names, drawn from small pools so that they meet in the joins — is put into one
store through the API; that store's exports (the four checkpoint files, written as kubelet
would), a sysfs tree of its topology and a pod log tree of its names are loaded into a fresh
store by ``import_node``. Every view, and every export, must then be the same in both.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.nodegen import write_sysfs
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from podstore import InvalidInputError, PodDevicesEntry, PodStore
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
    NumaTopology,
    PodName,
)
from podstore.storage.sql.node_views import NODE_VIEWS

PODS = [f"{i:04d}-pod" for i in range(5)]
CONTAINERS = ["main", "side"]
NUMA = st.integers(0, 3)
CPUS = st.frozensets(st.integers(0, 15), max_size=4)
SIZE = st.integers(0, 1 << 40)
WORD = st.text("abcxyz-.", min_size=1, max_size=6)


@st.composite
def device_entries(draw: st.DrawFn) -> list[PodDevicesEntry]:
    out = []
    for pod in draw(st.lists(st.sampled_from(PODS), unique=True, max_size=4)):
        for c in draw(st.lists(st.sampled_from(CONTAINERS), unique=True, min_size=1)):
            numa = draw(st.sampled_from([-1, 0, 1, 2, 3]))
            ids = draw(st.lists(st.sampled_from([f"GPU-{i}" for i in range(6)]), max_size=2))
            out.append(PodDevicesEntry(pod, c, "nvidia.com/gpu", {numa: ids}, b""))
    return out


@st.composite
def cpu_states(draw: st.DrawFn) -> CPUManagerState:
    entries = {
        pod: draw(st.dictionaries(st.sampled_from(CONTAINERS), CPUS, max_size=2))
        for pod in draw(st.lists(st.sampled_from(PODS), unique=True, max_size=4))
    }
    version = draw(st.sampled_from([2, 3, 4]))
    pods = {} if version == 2 else draw(st.dictionaries(st.sampled_from(PODS), CPUS, max_size=2))
    return CPUManagerState(
        draw(st.sampled_from(["none", "static"])), draw(CPUS), entries, pods, version=version
    )


@st.composite
def memory_states(draw: st.DrawFn) -> MemoryManagerState:
    block = st.builds(
        MemoryBlock,
        st.one_of(st.none(), st.lists(NUMA, max_size=3)),
        st.sampled_from(["memory", "hugepages-1Gi"]),
        SIZE,
    )
    table = st.builds(MemoryTable, SIZE, SIZE, SIZE, SIZE, SIZE)
    machine = draw(
        st.dictionaries(
            NUMA,
            st.builds(
                NUMANodeState,
                st.integers(0, 9),
                st.dictionaries(st.sampled_from(["memory", "hugepages-1Gi"]), table, max_size=2),
                st.lists(NUMA, max_size=2),
            ),
            max_size=3,
        )
    )
    entries = {
        pod: draw(st.dictionaries(st.sampled_from(CONTAINERS), st.lists(block, max_size=2)))
        for pod in draw(st.lists(st.sampled_from(PODS), unique=True, max_size=3))
    }
    version = draw(st.sampled_from([1, 2, 3]))
    return MemoryManagerState("Static", machine, entries, version=version)


@st.composite
def dra_states(draw: st.DrawFn) -> DRAState:
    claims = []
    for n, uid in enumerate(draw(st.lists(st.sampled_from("abcdef"), unique=True, max_size=4))):
        devices = draw(
            st.lists(
                st.builds(
                    DRADevice,
                    st.sampled_from(["pool-a", "pool-b"]),
                    st.sampled_from([f"dev-{i}" for i in range(4)]),
                    st.lists(WORD, max_size=2),
                    st.lists(WORD, max_size=1),
                    st.one_of(st.none(), WORD),
                ),
                max_size=2,
            )
        )
        claims.append(
            DRAClaim(
                f"claim-{uid}",
                f"c{n}",
                draw(st.sampled_from(["default", "team"])),
                frozenset(draw(st.lists(st.sampled_from(PODS), max_size=2))),
                {draw(st.sampled_from(["gpu.example.com", "nic.example.com"])): devices},
            )
        )
    return DRAState(claims)


@st.composite
def topologies(draw: st.DrawFn) -> NumaTopology | None:
    if draw(st.booleans()):
        return None
    per = draw(st.integers(1, 8))
    nodes = draw(st.integers(1, 3))
    return NumaTopology({n: frozenset(range(n * per, (n + 1) * per)) for n in range(nodes)})


# Kubernetes names (DNS labels): what kubelet puts in a pod log directory's name.
LABEL = st.from_regex(r"[a-z](?:[a-z0-9-]{0,5}[a-z0-9])?", fullmatch=True)
NAMES = st.dictionaries(st.sampled_from(PODS), st.builds(PodName, LABEL, LABEL), max_size=5)
VIEWS = [name for name, _ in NODE_VIEWS] + ["v_allocations"]


def _views(store: PodStore) -> dict[str, list[tuple[Any, ...]]]:
    return {
        v: sorted((tuple(r) for r in store.query(f"SELECT * FROM {v}").rows), key=repr)
        for v in VIEWS
    }


# No shrinking phase: a failing example of six parts shrinks for minutes; it is printed as drawn.
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    device_entries(),
    cpu_states(),
    memory_states(),
    dra_states(),
    topologies(),
    NAMES,
)
def test_export_then_import_node_gives_the_same_views(
    devices: list[PodDevicesEntry],
    cpu: CPUManagerState,
    memory: MemoryManagerState,
    dra: DRAState,
    topology: NumaTopology | None,
    names: dict[str, PodName],
) -> None:
    root = Path(tempfile.mkdtemp(prefix="node-prop-"))
    try:
        with PodStore.open(root / "a.db") as a, PodStore.open(root / "b.db") as b:
            try:
                with a.transaction():
                    a.from_checkpoint_data(devices)
                    a.set_cpu_state(cpu)
                    a.set_memory_state(memory)
                    a.set_dra_state(dra)
                    a.set_numa_topology(topology)
                    a.set_pod_names(names)
            except InvalidInputError:
                assume(False)  # a state kubelet could not have written
            kubelet = root / "kubelet"
            for kind in ("cpu", "memory", "dra"):
                path = kubelet / FILE_NAMES[kind]
                path.parent.mkdir(parents=True, exist_ok=True)
                a.export_node_checkpoint(path, kind)
            (kubelet / "device-plugins").mkdir()
            a.export_checkpoint(kubelet / FILE_NAMES["devices"])
            sysfs = root / "sys"
            sysfs.mkdir()
            if topology is not None:
                write_sysfs(sysfs, topology.nodes)
            logs = root / "pods"
            for uid, name in names.items():
                (logs / f"{name.namespace}_{name.name}_{uid}").mkdir(parents=True)
            report = b.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
            assert report.absent == ()
            va, vb = _views(a), _views(b)
            assert {k: (va[k], vb[k]) for k in VIEWS if va[k] != vb[k]} == {}
            for kind in ("cpu", "memory", "dra"):
                assert b.node_checkpoint_bytes(kind) == a.node_checkpoint_bytes(kind), kind
            # And loading it again changes nothing.
            assert b.import_node(kubelet, sysfs=sysfs, pod_logs=logs).events == 0
    finally:
        shutil.rmtree(root)
