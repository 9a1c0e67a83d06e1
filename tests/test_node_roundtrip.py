"""Random CPU, memory and DRA states survive write → read, and writing what was read gives the
same bytes again, in every written version and layout."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podstore.checkpoint import (
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
    read_cpu_state,
    read_dra_state,
    read_memory_state,
    read_node_checkpoint,
)

# Any text but lone surrogates (not UTF-8): quotes, backslashes, <>&, controls, non-ASCII.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
NAMES = st.one_of(st.sampled_from(["pod", "c", "memory", "hugepages-1Gi", ""]), TEXT)
CPUS = st.frozensets(st.integers(0, 400), max_size=24)
UINT64 = st.integers(0, (1 << 64) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
INTS = st.one_of(st.none(), st.lists(st.integers(-2, 70), max_size=4))


@st.composite
def cpu_states(draw: st.DrawFn) -> CPUManagerState:
    version = draw(st.sampled_from([2, 3, 4]))
    type_name = "CPUManagerCheckpoint"
    if version in (2, 3) and draw(st.booleans()):
        type_name = f"CPUManagerCheckpointV{version}"
    pods = {} if version == 2 else draw(st.dictionaries(NAMES, CPUS, max_size=4))
    return CPUManagerState(
        policy_name=draw(st.sampled_from(["none", "static"]) | TEXT),
        default_cpu_set=draw(CPUS),
        entries=draw(st.dictionaries(NAMES, st.dictionaries(NAMES, CPUS, max_size=3), max_size=4)),
        pod_entries=pods,
        version=version,
        type_name=type_name,
        legacy_copy=draw(st.sampled_from(["v2", "v3", "none"])) if version == 4 else "v2",
    )


@pytest.mark.parametrize(("version", "legacy_copy"), [(3, "v2"), (4, "v3"), (4, "v2")])
def test_a_pod_entry_without_cpus_is_written_as_kubelet_writes_it(
    version: int, legacy_copy: str
) -> None:
    """``PodEntry.MarshalJSON`` leaves an empty set out: ``{}``, never ``{"cpuSet":""}``. Both
    read back to the same state and checksum (the hash is over the decoded set), so only the
    bytes tell; kubelet's are what an export must give."""
    state = CPUManagerState(
        "static",
        frozenset(range(4)),
        pod_entries={"a": frozenset({4}), "z": frozenset()},
        version=version,
        legacy_copy=legacy_copy,
    )
    data = dumps_cpu_state(state)
    pods = '{"a":{"cpuSet":"4"},"z":{}}'
    # An embedded v2 copy has no podEntries: they are in the data string only.
    assert (f'"podEntries":{pods}' in data.decode()) == (legacy_copy != "v2" or version == 3)
    if version == 4:  # the data string holds it too, escaped
        assert f'"podEntries":{pods}'.replace('"', '\\"') in data.decode()
    assert b'"cpuSet":""' not in data.replace(b'\\"', b'"')  # nor in v4's escaped data
    assert read_cpu_state(data).pod_entries == state.pod_entries


@settings(max_examples=150, deadline=None)
@given(cpu_states())
def test_cpu_states_round_trip(state: CPUManagerState) -> None:
    data = dumps_cpu_state(state)
    back = read_cpu_state(data)
    assert dataclasses.replace(back, checksum=0) == state
    assert dumps_cpu_state(back) == data
    assert read_node_checkpoint(data).kind == "cpu"


TABLES = st.builds(MemoryTable, UINT64, UINT64, UINT64, UINT64, UINT64)
NODES = st.builds(
    NUMANodeState,
    INT64,
    st.one_of(st.none(), st.dictionaries(NAMES, st.one_of(st.none(), TABLES), max_size=3)),
    INTS,
)
BLOCKS = st.one_of(st.none(), st.lists(st.builds(MemoryBlock, INTS, NAMES, UINT64), max_size=3))


@st.composite
def memory_states(draw: st.DrawFn) -> MemoryManagerState:
    version = draw(st.sampled_from([1, 2, 3]))
    entries = draw(
        st.one_of(
            st.none(),
            st.dictionaries(
                NAMES, st.one_of(st.none(), st.dictionaries(NAMES, BLOCKS, max_size=3)), max_size=3
            ),
        )
    )
    pods = (
        {}
        if version == 1
        else draw(st.one_of(st.none(), st.dictionaries(NAMES, BLOCKS, max_size=3)))
    )
    return MemoryManagerState(
        policy_name=draw(st.sampled_from(["None", "Static"]) | TEXT),
        machine_state=draw(
            st.one_of(
                st.none(),
                st.dictionaries(st.integers(-3, 300), st.one_of(st.none(), NODES), max_size=4),
            )
        ),
        entries=entries,
        pod_entries=pods,
        version=version,
    )


def _as_read_back(state: MemoryManagerState) -> MemoryManagerState:
    """What a written state reads back as: omitempty writes nil and empty alike."""
    pods = {p: (b or None) for p, b in (state.pod_entries or {}).items()}
    return dataclasses.replace(state, entries=state.entries or {}, pod_entries=pods)


@settings(max_examples=150, deadline=None)
@given(memory_states())
def test_memory_states_round_trip(state: MemoryManagerState) -> None:
    data = dumps_memory_state(state)
    back = read_memory_state(data)
    assert dataclasses.replace(back, checksum=0) == _as_read_back(state)
    assert dumps_memory_state(back) == data
    assert read_node_checkpoint(data).kind == "memory"


def _devices(share_ids: bool) -> Any:
    share = st.one_of(st.none(), TEXT) if share_ids else st.none()
    device = st.builds(
        DRADevice,
        NAMES,
        NAMES,
        st.one_of(st.none(), st.lists(TEXT, max_size=2)),
        st.one_of(st.none(), st.lists(TEXT, max_size=2)),
        share,
    )
    return st.one_of(st.none(), st.lists(device, max_size=3))


@st.composite
def dra_states(draw: st.DrawFn) -> DRAState:
    share_ids = draw(st.booleans())
    claim = st.builds(
        DRAClaim,
        TEXT,
        TEXT,
        TEXT,
        st.one_of(st.none(), st.frozensets(TEXT, max_size=3)),
        st.one_of(st.none(), st.dictionaries(NAMES, _devices(share_ids), max_size=3)),
    )
    return DRAState(
        claims=draw(st.one_of(st.none(), st.lists(claim, max_size=4))),
        entries_key=draw(st.sampled_from(["Entries", "ClaimInfoStateList"])),
        share_ids=share_ids,
        kind=draw(st.sampled_from(["DRACheckpoint", ""]) | TEXT),
        api_version=draw(st.sampled_from(["checkpoint.dra.kubelet.k8s.io/v1", ""])),
    )


@settings(max_examples=150, deadline=None)
@given(dra_states())
def test_dra_states_round_trip(state: DRAState) -> None:
    data = dumps_dra_state(state)
    back = read_dra_state(data)
    expected = state
    if not any(
        d is not None and len(d) > 0
        for c in state.claims or ()
        for d in (c.driver_state or {}).values()
    ):
        # With no device to carry the field, a file says nothing of share ids.
        expected = dataclasses.replace(state, share_ids=False)
    assert dataclasses.replace(back, checksum=0) == expected
    assert dumps_dra_state(back) == data
    assert read_node_checkpoint(data).kind == "dra"
