"""CPU v4's legacy copy beside ``data``: read in each shape kubelet releases wrote, kept in the
store, written back in the shape it was read in (docs/kubelet-releases.md §3.1)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from podstore import PodStore
from podstore.checkpoint import CPUManagerState, dumps_cpu_state, read_cpu_state

VECTORS = Path(__file__).parent / "vectors" / "node"
EMBEDDED_V2 = VECTORS / "cpu-v4-embedded-v2.json"
EMBEDDED_V2_PODS = VECTORS / "cpu-v4-embedded-v2-pod-entries.json"
V3_ZERO = VECTORS / "cpu-v4-compact.json"
V3_ZERO_PODS = VECTORS / "cpu-v4-compact-pod-entries.json"

STATE = CPUManagerState(
    "static",
    frozenset({1, 2}),
    entries={"pod1": {"container1": frozenset({5, 6}), "container2": frozenset({3, 4})}},
    pod_entries={"pod2": frozenset({7, 8, 9})},
    version=4,
)


def ok(*args: str | Path, cwd: Path) -> str:
    res = subprocess.run(
        ["podstore", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize(
    ("path", "shape"),
    [(EMBEDDED_V2, "v2"), (EMBEDDED_V2_PODS, "v2"), (V3_ZERO, "v3"), (V3_ZERO_PODS, "v3")],
    ids=lambda x: x.name if isinstance(x, Path) else x,
)
def test_each_shape_is_read_and_exported_byte_for_byte(
    tmp_path: Path, path: Path, shape: str
) -> None:
    assert read_cpu_state(path).legacy_copy == shape
    ok("import", path, cwd=tmp_path)
    ok("export", tmp_path / "out", "--kind", "cpu", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == path.read_bytes()


def test_a_file_with_no_legacy_copy_is_written_back_without_one(tmp_path: Path) -> None:
    source = tmp_path / "cpu_manager_state"
    source.write_bytes(dumps_cpu_state(dataclasses.replace(STATE, legacy_copy="none")))
    assert list(json.loads(source.read_bytes())) == ["data", "dataChecksum"]
    assert read_cpu_state(source).legacy_copy == "none"
    ok("import", source, cwd=tmp_path)
    ok("export", tmp_path / "out", "--kind", "cpu", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == source.read_bytes()


def test_a_shape_change_is_written_on_the_next_import(tmp_path: Path) -> None:
    """The same state in the other shape: only the kept shape changes, and export follows."""
    ok("import", V3_ZERO_PODS, cwd=tmp_path)
    ok("import", EMBEDDED_V2_PODS, cwd=tmp_path)
    ok("export", tmp_path / "out", "--kind", "cpu", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == EMBEDDED_V2_PODS.read_bytes()


def test_the_embedded_v2_checksum_is_the_upstream_v2_value() -> None:
    """kubernetes state_checkpoint_test.go (1.18–1.35) "Restore valid checkpoint": v2 file
    ``none``, ``1-3``, ``{pod:{container1:4-6, container2:1-3}}`` has checksum 3610638499;
    1.37's embedded v2 copy of the same state carries that checksum."""
    doc = json.loads(EMBEDDED_V2.read_bytes())
    assert doc["checksum"] == 3610638499
    assert list(doc) == [
        "policyName",
        "defaultCpuSet",
        "entries",
        "checksum",
        "data",
        "dataChecksum",
    ]


def test_the_embedded_v2_checksum_is_the_v2_rule_on_the_same_values() -> None:
    """The outer copy of a state with pod entries is the v2 file of the state without them:
    podstore's v2 reader verifies that file with the outer checksum."""
    doc = json.loads(EMBEDDED_V2_PODS.read_bytes())
    assert "podEntries" not in doc
    v2_file = json.dumps(
        {k: doc[k] for k in ("policyName", "defaultCpuSet", "entries", "checksum")}
    ).encode()
    v2 = read_cpu_state(v2_file)
    assert (v2.version, v2.verified, v2.type_name) == (2, True, "CPUManagerCheckpoint")
    assert v2.checksum == doc["checksum"]
    assert read_cpu_state(EMBEDDED_V2_PODS).pod_entries == {"pod2": frozenset({7, 8, 9})}


def test_a_state_set_through_the_api_is_written_as_embedded_v2(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        store.set_cpu_state(STATE)
        data = store.node_checkpoint_bytes("cpu")
    assert data == EMBEDDED_V2_PODS.read_bytes()


def test_a_store_from_before_the_shape_was_kept_exports_embedded_v2(tmp_path: Path) -> None:
    ok("import", V3_ZERO_PODS, cwd=tmp_path)
    with sqlite3.connect(tmp_path / "podstore.db") as raw:
        raw.execute("UPDATE node_files SET form = json_remove(form, '$.legacy_copy')")
    ok("export", tmp_path / "out", "--kind", "cpu", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == EMBEDDED_V2_PODS.read_bytes()


def test_an_unknown_shape_is_refused() -> None:
    from podstore import InvalidInputError

    with pytest.raises(InvalidInputError, match="legacy_copy must be one of v2, v3, none"):
        dumps_cpu_state(dataclasses.replace(STATE, legacy_copy="v4"))
