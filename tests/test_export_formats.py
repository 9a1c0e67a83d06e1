"""``podstore export`` in an older format, as the release that writes it does: downgrade files
written, read back by podstore's readers, and checked against upstream test values
(docs/kubelet-releases.md §7); refusals when the format cannot hold the state."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from harness.release_writers import as_release

from podstore import ExportRefusedError, PodStore
from podstore.checkpoint import (
    read_checkpoint,
    read_cpu_state,
    read_dra_state,
    read_memory_state,
)

NODE = Path(__file__).parent / "vectors" / "node"
DEVICE = Path(__file__).parent / "vectors"


def podstore(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podstore", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def ok(*args: str | Path, cwd: Path) -> str:
    res = podstore(*args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res.stdout


def export_as(
    tmp_path: Path, source: Path, kind: str, fmt: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    ok("import", source, "--kind", kind, cwd=tmp_path)
    out = tmp_path / f"out-{fmt}"
    return podstore(
        "export", out, "--kind", kind, *as_release(kind, fmt), *extra, cwd=tmp_path
    ), out


# -- CPU ---------------------------------------------------------------------------------------


def test_cpu_v4_with_pod_entries_as_v3_is_upstreams_v3_file(tmp_path: Path) -> None:
    """state_checkpoint_test.go (2026 master) "legacy v3 checksum": static, 1-2, entries
    {pod1:{container1:5-6, container2:3-4}}, podEntries {pod2:7-9} → 766259872."""
    res, out = export_as(tmp_path, NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "v3")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "cpu-v3-compact.json").read_bytes()
    back = read_cpu_state(out)
    assert (back.version, back.checksum, back.verified) == (3, 766259872, True)
    assert "dropped" not in res.stdout
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_cpu_v4_as_v2_has_the_upstream_v2_checksum(tmp_path: Path) -> None:
    """1.18–1.35 "Restore valid checkpoint": none, 1-3, {pod:{container1:4-6,
    container2:1-3}} → 3610638499."""
    res, out = export_as(tmp_path, NODE / "cpu-v4-embedded-v2.json", "cpu", "v2")
    assert res.returncode == 0, res.stderr
    back = read_cpu_state(out)
    assert (back.version, back.checksum, back.verified) == (2, 3610638499, True)
    assert back.entries == read_cpu_state(NODE / "cpu-v2-pod.json").entries


def test_cpu_pod_entries_refuse_v2_and_nothing_is_written(tmp_path: Path) -> None:
    res, out = export_as(tmp_path, NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "v2")
    assert res.returncode == 1
    assert "podEntries: the CPUs of 1 pod" in res.stderr
    assert "--allow-loss" in res.stderr
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("out")] == []


def test_a_refusal_leaves_an_existing_file_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out-v2"
    out.write_bytes(b"kept")
    res, _ = export_as(tmp_path, NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "v2")
    assert res.returncode == 1
    assert out.read_bytes() == b"kept"


def test_allow_loss_writes_v2_and_lists_the_drop(tmp_path: Path) -> None:
    source = NODE / "cpu-v4-embedded-v2-pod-entries.json"
    res, out = export_as(tmp_path, source, "cpu", "v2", "--allow-loss")
    assert res.returncode == 0, res.stderr
    assert "  dropped: podEntries: the CPUs of 1 pod (no pod-level CPUs in v2)" in res.stdout
    back = read_cpu_state(out)
    assert (back.version, back.verified, back.pod_entries) == (2, True, {})
    # The outer copy 1.37 writes is that very v2 file: same values, same checksum.
    outer = json.loads(source.read_bytes())
    assert back.checksum == outer["checksum"]
    assert back.entries == read_cpu_state(source).entries


def test_cpu_v3_shaped_v4_is_written_as_embedded_v2_for_v4(tmp_path: Path) -> None:
    res, out = export_as(tmp_path, NODE / "cpu-v4-compact-pod-entries.json", "cpu", "v4")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "cpu-v4-embedded-v2-pod-entries.json").read_bytes()


# -- memory ------------------------------------------------------------------------------------


def test_memory_v3_as_v2_is_upstreams_v2_file(tmp_path: Path) -> None:
    """memorymanager state_checkpoint_test.go "Restore checkpoint from v2 with
    PodLevelResourceManagers enabled" → 1278640530."""
    res, out = export_as(tmp_path, NODE / "memory-v3-compact-pod-entries.json", "memory", "v2")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "memory-v2-compact.json").read_bytes()
    assert read_memory_state(out).checksum == 1278640530


def test_memory_pod_entries_refuse_v1_unless_allow_loss(tmp_path: Path) -> None:
    """Allowed, the file is upstream's v1 "Restore valid checkpoint" (4215593881)."""
    source = NODE / "memory-v3-compact-pod-entries.json"
    res, out = export_as(tmp_path, source, "memory", "v1")
    assert res.returncode == 1
    assert "podEntries: the memory of 1 pod" in res.stderr
    assert not out.exists()
    res = podstore(
        "export", out, "--kind", "memory", *as_release("memory", "v1"), "--allow-loss", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "dropped: podEntries: the memory of 1 pod" in res.stdout
    assert out.read_bytes() == (NODE / "memory-v1-compact.json").read_bytes()
    back = read_memory_state(out)
    assert (back.version, back.checksum, back.pod_entries) == (1, 4215593881, {})


def test_memory_without_pod_entries_writes_v1_without_loss(tmp_path: Path) -> None:
    res, out = export_as(tmp_path, NODE / "memory-v3-compact.json", "memory", "v1")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "memory-v1-compact.json").read_bytes()


# -- DRA ---------------------------------------------------------------------------------------


def test_dra_data_as_1_31_v1_is_upstreams_file(tmp_path: Path) -> None:
    """dra state_checkpoint_test.go v1.31 "Restore checkpoint - single claim" → 1925941526."""
    res, out = export_as(tmp_path, NODE / "dra-data-entries-single.json", "dra", "v1")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "dra-v1-structured-single.json").read_bytes()
    back = read_dra_state(out)
    assert (back.version, back.checksum) == ("v1", 1925941526)


def test_dra_1_31_v1_as_data_is_upstreams_file(tmp_path: Path) -> None:
    """checkpointer_test.go "single-claim-info-state" → CRC32 1597924435."""
    res, out = export_as(tmp_path, NODE / "dra-v1-structured-single.json", "dra", "data")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "dra-data-entries-single.json").read_bytes()
    assert read_dra_state(out).checksum == 1597924435


def test_dra_1_31_v1_round_trips_the_checkpoint_store_vector(tmp_path: Path) -> None:
    res, out = export_as(tmp_path, NODE / "dra-v1-structured-store.json", "dra", "v1")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (NODE / "dra-v1-structured-store.json").read_bytes()


def test_classic_dra_claims_refuse_every_written_format(tmp_path: Path) -> None:
    source = NODE / "dra-v1-classic-single.json"
    for fmt in ("data", "v1"):
        res, out = export_as(tmp_path, source, "dra", fmt)
        assert res.returncode == 1
        assert "claims in the classic DRA v1 layout (driver, class, resource handles): 1" in (
            res.stderr
        )
        assert not out.exists()
    res = podstore(
        "export", out, "--kind", "dra", *as_release("dra", "v1"), "--allow-loss", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert read_dra_state(out).claims is not None
    assert read_dra_state(out).claims == []


def test_share_ids_are_a_loss_in_1_31_v1(tmp_path: Path) -> None:
    from podstore.checkpoint import DRAClaim, DRADevice, DRAState

    state = DRAState(
        [
            DRAClaim(
                "uid",
                "claim",
                "ns",
                frozenset({"pod"}),
                {"drv": [DRADevice("pool", "dev", ["r"], None, "share-1")]},
            )
        ],
        share_ids=True,
    )
    with PodStore.open(tmp_path / "s.db") as store:
        store.set_dra_state(state)
        with pytest.raises(ExportRefusedError) as info:
            store.export_as(tmp_path / "out", "dra", "v1")
        assert info.value.drops == ("ShareID of 1 device",)
        assert not (tmp_path / "out").exists()
        report = store.export_as(tmp_path / "out", "dra", "v1", allow_loss=True)
    assert report.dropped == ("ShareID of 1 device",) and report.format == "v1"
    claim = (read_dra_state(tmp_path / "out").claims or [])[0]
    assert claim.driver_state == {"drv": [DRADevice("pool", "dev", ["r"], None)]}


# -- devices -----------------------------------------------------------------------------------


def test_a_v1_device_file_is_written_back_as_v1(tmp_path: Path) -> None:
    """kubelet-semantics §6.6 V1 (confirmed with Go): 1534763759."""
    source = DEVICE / "hand-v1.json"
    res, out = export_as(tmp_path, source, "devices", "v1")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == source.read_bytes()
    back = read_checkpoint(out)
    assert (back.version, back.checksum) == (1, 1534763759)


@pytest.mark.parametrize("name", ["v1-small.json", "v1-edge.json"])
def test_v1_device_vectors_round_trip_through_the_v1_writer(tmp_path: Path, name: str) -> None:
    res, out = export_as(tmp_path, DEVICE / name, "devices", "v1")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (DEVICE / name).read_bytes()


def test_numa_placement_is_a_loss_in_v1(tmp_path: Path) -> None:
    source = DEVICE / "v2-small.json"
    res, out = export_as(tmp_path, source, "devices", "v1")
    assert res.returncode == 1
    assert "NUMA nodes of the devices of" in res.stderr
    assert not out.exists()
    res = podstore("export", out, *as_release("devices", "v1"), "--allow-loss", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "dropped: NUMA nodes of the devices of" in res.stdout
    back = read_checkpoint(out)
    original = read_checkpoint(source)
    assert back.version == 1
    assert [
        sorted({d for ids in e.device_ids.values() for d in ids or ()}) for e in back.entries
    ] == [sorted({d for ids in e.device_ids.values() for d in ids or ()}) for e in original.entries]


def test_v2_for_a_release_writes_no_boot_id_unless_given(tmp_path: Path) -> None:
    source = DEVICE / "v2-bootid.json"
    res, out = export_as(tmp_path, source, "devices", "v2")
    assert res.returncode == 0, res.stderr
    assert read_checkpoint(out).boot_id is None
    assert read_checkpoint(out).checksum == read_checkpoint(source).checksum
    res = podstore("export", out, *as_release("devices", "v2"), "--boot-id", "b", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert read_checkpoint(out).boot_id == "b"


# -- usage -------------------------------------------------------------------------------------


def test_allow_loss_without_a_target_is_a_usage_error(tmp_path: Path) -> None:
    ok("import", NODE / "cpu-v4-embedded-v2.json", cwd=tmp_path)
    res = podstore("export", tmp_path / "out", "--kind", "cpu", "--allow-loss", cwd=tmp_path)
    assert res.returncode == 2
    assert "--allow-loss needs --kubelet-version" in res.stderr
    assert not (tmp_path / "out").exists()


def test_a_release_podstore_cannot_write_for_is_refused(tmp_path: Path) -> None:
    ok("import", NODE / "memory-v1.json", "--kind", "memory", cwd=tmp_path)
    out = tmp_path / "out"
    res = podstore("export", out, "--kind", "memory", "--kubelet-version", "1.17", cwd=tmp_path)
    assert res.returncode == 2
    assert "1.18..1.37" in res.stderr
    # no memory manager before 1.21 (docs/kubelet-release-table.md)
    res = podstore("export", out, "--kind", "memory", "--kubelet-version", "1.20", cwd=tmp_path)
    assert res.returncode == 2
    assert "writes no memory checkpoint" in res.stderr
    res = podstore("export", out, "--kind", "memory", "--feature-gates", "X=true", cwd=tmp_path)
    assert res.returncode == 2
    assert not out.exists()


def test_dra_for_a_release_before_1_31_is_refused(tmp_path: Path) -> None:
    """1.27-1.30 wrote DRA layouts podstore does not write (docs/kubelet-releases.md §5)."""
    ok("import", NODE / "dra-data-entries-single.json", "--kind", "dra", cwd=tmp_path)
    out = tmp_path / "out"
    res = podstore("export", out, "--kind", "dra", "--kubelet-version", "1.30", cwd=tmp_path)
    assert res.returncode == 1
    assert "format 'v1 classic' is not written for dra" in res.stderr
    assert not out.exists()


def test_a_versioned_type_name_is_rewritten_under_the_legacy_one(tmp_path: Path) -> None:
    """A v3 file hashed as ``CPUManagerCheckpointV3`` (2284712151) written for a release is
    hashed as releases write it, under ``CPUManagerCheckpoint`` (766259872, "legacy v3
    checksum")."""
    source = NODE / "cpu-v3-pod-entries-typename.json"
    assert read_cpu_state(source).checksum == 2284712151
    res, out = export_as(tmp_path, source, "cpu", "v3")
    assert res.returncode == 0, res.stderr
    assert read_cpu_state(out).checksum == 766259872
