"""Every node vector (tests/vectors/node) gets kubelet's verdict, decodes to the state the
upstream test expects, is told apart by content, and — when kubelet wrote it — writes back to
the same bytes. A one-byte change to any of them is refused unless kubelet's own rules make it
irrelevant (the file then decodes to the very same state)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podstore.checkpoint import (
    CPUManagerState,
    DRAState,
    MemoryManagerState,
    NodeCheckpoint,
    detect_kind,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
    read_cpu_state,
    read_dra_state,
    read_memory_state,
    read_node_checkpoint,
)
from podstore.errors import CheckpointCorruptError, CheckpointError, CheckpointFormatError

VECTORS = Path(__file__).parent / "vectors" / "node"
MANIFEST = json.loads((VECTORS / "MANIFEST.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = MANIFEST["vectors"]
ACCEPTED = [c for c in CASES if c["importer_must"] == "accept"]
READERS = {"cpu": read_cpu_state, "memory": read_memory_state, "dra": read_dra_state}
WRITERS = {"cpu": dumps_cpu_state, "memory": dumps_memory_state, "dra": dumps_dra_state}
# Formats podstore writes (DRA v1 is read only: kubelet no longer writes it).
WRITTEN = {"cpu": {"v2", "v3", "v4"}, "memory": {"v1", "v2", "v3"}, "dra": {"data"}}


def _id(case: dict[str, Any]) -> str:
    return str(case["file"])


def _data(case: dict[str, Any]) -> bytes:
    return (VECTORS / case["file"]).read_bytes()


def test_the_manifest_covers_every_file_and_kind() -> None:
    files = {p.name for p in VECTORS.glob("*.json")} - {"MANIFEST.json"}
    assert files == {c["file"] for c in CASES}
    formats = {(c["kind"], c["format"]) for c in ACCEPTED}
    assert formats == {
        ("cpu", "v1"),
        ("cpu", "v2"),
        ("cpu", "v3"),
        ("cpu", "v4"),
        ("memory", "v1"),
        ("memory", "v2"),
        ("memory", "v3"),
        ("dra", "v1"),
        ("dra", "data"),
    }
    # Every current format has a vector in kubelet's compact form.
    compact = {(c["kind"], c["format"]) for c in ACCEPTED if c["kubelet_compact"]}
    assert {("cpu", "v4"), ("memory", "v3"), ("dra", "data")} <= compact


def _cpus(cpus: frozenset[int]) -> list[int]:
    return sorted(cpus)


def _cpu_view(state: CPUManagerState) -> dict[str, Any]:
    return {
        "policy": state.policy_name,
        "default": _cpus(state.default_cpu_set),
        "entries": {
            pod: {c: _cpus(cpus) for c, cpus in containers.items()}
            for pod, containers in state.entries.items()
        },
        "pod_entries": {pod: _cpus(cpus) for pod, cpus in state.pod_entries.items()},
        "legacy_entries": {cid: _cpus(cpus) for cid, cpus in state.legacy_entries.items()},
    }


def _memory_view(state: MemoryManagerState) -> dict[str, Any]:
    def blocks(bs: Any) -> Any:
        return None if bs is None else [[b.numa_affinity, b.type, b.size] for b in bs]

    machine = {}
    for node, s in (state.machine_state or {}).items():
        assert s is not None and s.memory_map is not None
        machine[str(node)] = {
            "assignments": s.number_of_assignments,
            "memory_map": {
                k: [t.total, t.system_reserved, t.allocatable, t.reserved, t.free]
                for k, t in s.memory_map.items()
                if t is not None
            },
            "cells": s.cells,
        }
    return {
        "policy": state.policy_name,
        "machine_state": machine,
        "entries": {
            pod: {c: blocks(b) for c, b in (containers or {}).items()}
            for pod, containers in (state.entries or {}).items()
        },
        "pod_entries": {pod: blocks(b) for pod, b in (state.pod_entries or {}).items()},
    }


def _dra_view(state: DRAState) -> dict[str, Any]:
    claims = []
    for c in state.claims or ():
        view: dict[str, Any] = {
            "claim_uid": c.claim_uid,
            "claim_name": c.claim_name,
            "namespace": c.namespace,
            "pod_uids": sorted(c.pod_uids or ()),
        }
        if c.driver_state is not None:
            view["driver_state"] = {
                d: [
                    [x.pool_name, x.device_name, x.share_id, x.request_names, x.cdi_device_ids]
                    for x in devices or ()
                ]
                for d, devices in c.driver_state.items()
            }
        else:
            view.update(
                driver_name=c.driver_name,
                class_name=c.class_name,
                resource_handles=(
                    None
                    if c.resource_handles is None
                    else [[h.driver_name, h.data] for h in c.resource_handles]
                ),
                cdi_devices=c.cdi_devices,
            )
        claims.append(view)
    out: dict[str, Any] = {"claims": claims}
    if state.version == "data":
        out["entries_key"] = state.entries_key
    return out


def _view(cp: NodeCheckpoint) -> dict[str, Any]:
    state = cp.state
    if isinstance(state, CPUManagerState):
        return _cpu_view(state)
    if isinstance(state, MemoryManagerState):
        return _memory_view(state)
    assert isinstance(state, DRAState)
    return _dra_view(state)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_kubelet_verdict(case: dict[str, Any]) -> None:
    data = _data(case)
    must = case["importer_must"]
    if must == "accept":
        cp = read_node_checkpoint(data, case["kind"])
        assert cp.version == case["format"]
        assert _view(cp) == case["expect"]
        # Only a stored 0 is accepted unverified (the two zero-checksum vectors).
        assert cp.verified is ("zero-checksum" not in case["file"])
    elif must == "reject-checksum":
        with pytest.raises(CheckpointCorruptError) as info:
            read_node_checkpoint(data, case["kind"])
        # .expected is what the file stores; .actual what the rules compute from it.
        assert info.value.expected != info.value.actual
        assert str(info.value.expected) in str(info.value)
    else:
        with pytest.raises(CheckpointFormatError):
            read_node_checkpoint(data, case["kind"])


@pytest.mark.parametrize("case", ACCEPTED, ids=_id)
def test_kind_is_told_by_content(case: dict[str, Any], tmp_path: Path) -> None:
    data = _data(case)
    assert detect_kind(data) == case["kind"]
    path = tmp_path / "state"
    path.write_bytes(data)
    cp = read_node_checkpoint(path)
    assert (cp.kind, cp.version) == (case["kind"], case["format"])
    assert cp.state == READERS[case["kind"]](path)


@pytest.mark.parametrize(
    "case",
    [c for c in ACCEPTED if c["kubelet_compact"] and c["format"] in WRITTEN[c["kind"]]],
    ids=_id,
)
def test_kubelet_written_files_write_back_byte_for_byte(case: dict[str, Any]) -> None:
    data = _data(case)
    state = READERS[case["kind"]](data)
    assert WRITERS[case["kind"]](state) == data


@pytest.mark.parametrize("case", ACCEPTED, ids=_id)
def test_every_accepted_vector_writes_in_the_current_format(case: dict[str, Any]) -> None:
    """Whatever version was read, the current one written holds the same state."""
    kind = case["kind"]
    state = READERS[kind](_data(case))
    if kind == "cpu":
        assert isinstance(state, CPUManagerState)
        if state.legacy_entries:
            pytest.skip("v1 entries are keyed by container id; kubelet maps them to pods first")
        state.version = 4
    elif kind == "memory":
        assert isinstance(state, MemoryManagerState)
        state.version = 3
    else:
        assert isinstance(state, DRAState)
        if state.version == "v1" and any(c.driver_state is None for c in state.claims or ()):
            pytest.skip("classic DRA v1 claims have no devices to write in the data format")
        state.version = "data"
        state.entries_key = "Entries"
    written = WRITERS[kind](state)
    again = read_node_checkpoint(written, kind)
    assert again.version == {"cpu": "v4", "memory": "v3", "dra": "data"}[kind]
    assert _view(again) == {
        **case["expect"],
        **({"entries_key": "Entries"} if kind == "dra" else {}),
    }


def _mutations(data: bytes) -> list[tuple[int, bytes]]:
    """Every position with one byte replaced by a character no JSON token treats like the
    original (never whitespace, never the same letter in another case)."""
    out = []
    for i, b in enumerate(data):
        new = b"#" if b != ord("#") else b"$"
        out.append((i, data[:i] + new + data[i + 1 :]))
    return out


@pytest.mark.parametrize("case", ACCEPTED, ids=_id)
def test_one_byte_changes_are_refused_or_irrelevant(case: dict[str, Any]) -> None:
    data = _data(case)
    kind = case["kind"]
    original = _view(read_node_checkpoint(data, kind))
    refused = 0
    irrelevant: list[int] = []
    for i, mutated in _mutations(data):
        try:
            cp = read_node_checkpoint(mutated, kind)
        except CheckpointError:
            refused += 1
            continue
        # Accepted: kubelet's rules ignored the byte (a key of a zero-valued field, a part the
        # newer formats do not read), or the checksum key lost its name, leaving a stored 0
        # that kubelet accepts unverified in old formats (and reads as such).
        if cp.verified:
            assert _view(cp) == original, f"byte {i} changed the file, yet it verified"
        irrelevant.append(i)
    assert refused > 0
    if case["kubelet_compact"] and (kind, case["format"]) in _WHOLE_STRUCT:
        # Every byte counts but for object keys: of a field left at its zero value, or the
        # checksum key (a missing checksum is a stored 0).
        keys = _key_bytes(data)
        assert [i for i in irrelevant if i not in keys] == []
    if kind == "dra" and case["format"] == "data":
        assert irrelevant == []  # the CRC covers all of Data, and Checksum must match it


_WHOLE_STRUCT = {("cpu", "v2"), ("cpu", "v3"), ("memory", "v1"), ("memory", "v2"), ("dra", "v1")}


def _key_bytes(data: bytes) -> set[int]:
    """Byte positions inside object keys of a compact document without escaped quotes."""
    import re

    out: set[int] = set()
    for m in re.finditer(rb'"[^"\\]*":', data):
        out.update(range(m.start(), m.end() - 1))
    return out


def test_one_byte_changes_in_a_large_file_are_refused() -> None:
    """Sampled positions of a 1,000-container file written in each current format."""
    import random

    rng = random.Random(7)
    cpu = CPUManagerState(
        "static",
        frozenset(range(0, 8)),
        {f"pod-{i:04d}": {"main": frozenset({8 + i % 120, 9 + i % 120})} for i in range(1000)},
    )
    data = dumps_cpu_state(cpu)
    positions = rng.sample(range(len(data)), 300)
    for i in positions:
        mutated = data[:i] + (b"#" if data[i] != ord("#") else b"$") + data[i + 1 :]
        try:
            got = read_cpu_state(mutated)
        except CheckpointError:
            continue
        got.checksum = cpu.checksum = 0
        assert _cpu_view(got) == _cpu_view(cpu), f"byte {i}"
