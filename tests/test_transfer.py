"""Importing kubelet checkpoint files into a store and exporting them back.

The vectors in tests/vectors come with what kubelet itself does with each file (MANIFEST.json);
the store must accept and refuse the same files, skip the same entries, and give back every
file kubelet wrote (v2-*, real-*) byte for byte.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podstore import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    ContainerAllocateResponse,
    ExportReport,
    InvalidInputError,
    PodDevicesEntry,
    PodStore,
    SkippedEntry,
)
from podstore.checkpoint import dumps_checkpoint, read_checkpoint
from podstore.storage.transfer import NO_RESPONSE

VECTORS = Path(__file__).parent / "vectors"
MANIFEST: list[dict[str, Any]] = json.loads((VECTORS / "MANIFEST.json").read_text())["vectors"]
ACCEPTED = [v for v in MANIFEST if v["importer_must"] == "accept"]
REJECTED = [v for v in MANIFEST if v["importer_must"] != "accept"]
KUBELET_WRITTEN = [v for v in MANIFEST if v["file"].startswith(("v2-", "real-"))]


def dump(store: PodStore) -> tuple[Any, ...]:
    """Everything observable about a store's state, for before/after comparisons."""
    return (
        [
            (e.pod_uid, e.container_name, e.resource_name, e.device_ids, e.alloc_resp)
            for e in store.to_checkpoint_data()
        ],
        store.registered_devices(),
        sorted(store.pods()),
        {k: sorted(v) for k, v in store.devices().items()},
    )


def prefill(store: PodStore) -> None:
    store.insert("keep-pod", "c", "example.com/dev", {0: ["d0"]}, b"")
    store.set_registered_devices({"example.com/dev": ["d0", "d1"]})


@pytest.mark.parametrize("vector", ACCEPTED, ids=lambda v: v["file"])
def test_import_accepts_what_kubelet_accepts(store: PodStore, vector: dict[str, Any]) -> None:
    expect = json.loads((VECTORS / vector["expect"]).read_text())
    prefill(store)
    report = store.import_checkpoint(VECTORS / vector["file"])
    assert report.version == (1 if vector["format"] == "v1" else 2)
    assert report.checksum == vector["stored_checksum"]
    assert report.entries == vector["num_entries"]
    assert [s.index for s in report.skipped] == vector["kubelet_skips_entries"]
    assert report.imported == vector["num_entries"] - len(vector["kubelet_skips_entries"])
    assert not report.merged
    # Not a merge: the prefilled pod is gone, the file's registered devices replace ours.
    assert "keep-pod" not in store
    assert store.registered_devices() == {
        r: list(ids or []) for r, ids in (expect["registered_devices"] or {}).items()
    }
    restored = [e for e in expect["entries"] if e["kubelet_restores_entry"]]
    got = store.to_checkpoint_data()
    assert [(e.pod_uid, e.container_name, e.resource_name) for e in got] == [
        (e["pod_uid"], e["container_name"], e["resource_name"]) for e in restored
    ]
    for entry, want in zip(got, restored, strict=True):
        want_ids = want["device_ids"]
        if vector["format"] == "v1" and want_ids is not None and not isinstance(want_ids, dict):
            want_ids = {"0": want_ids}
        assert entry.device_ids == (
            None if want_ids is None else {int(k): v for k, v in want_ids.items()}
        )
        if want["alloc_resp_b64"] is not None:
            assert entry.alloc_resp == base64.b64decode(want["alloc_resp_b64"])


@pytest.mark.parametrize("vector", REJECTED, ids=lambda v: v["file"])
def test_import_refuses_what_kubelet_refuses_and_changes_nothing(
    store: PodStore, vector: dict[str, Any]
) -> None:
    prefill(store)
    before = dump(store)
    expected = (
        CheckpointCorruptError
        if vector["importer_must"] == "reject-checksum"
        else CheckpointFormatError
    )
    with pytest.raises(expected) as info:
        store.import_checkpoint(VECTORS / vector["file"])
    if isinstance(info.value, CheckpointCorruptError):
        assert info.value.expected == vector["stored_checksum"]
        assert info.value.actual == vector["checksum"]
    assert dump(store) == before


@pytest.mark.parametrize("vector", KUBELET_WRITTEN, ids=lambda v: v["file"])
def test_kubelet_files_round_trip_byte_for_byte(
    store: PodStore, tmp_path: Path, vector: dict[str, Any]
) -> None:
    source = VECTORS / vector["file"]
    report = store.import_checkpoint(source)
    out = tmp_path / "kubelet_internal_checkpoint"
    exported = store.export_checkpoint(out, boot_id=report.boot_id)
    assert exported.entries == report.imported and exported.left_out == ()
    assert out.read_bytes() == source.read_bytes()


def test_export_reports_the_entries_it_leaves_out(store: PodStore, tmp_path: Path) -> None:
    """The README's quick start: pod-uid-2's GPU-0 has no allocation response, so kubelet's
    file would not list it; the export writes those bytes and names the entry it left out."""
    store.insert("pod-uid-1", "a", "nvidia.com/gpu", {0: ["GPU-1"]}, b"")
    store.insert("pod-uid-2", "c", "nvidia.com/gpu", {-1: ["GPU-0"]}, None)
    store.insert("pod-uid-3", "b", "example.com/nic", {1: ["NIC-0"]}, b"\x12\x00")
    report = store.export_checkpoint(tmp_path / "out")
    assert report == ExportReport(
        str(tmp_path / "out"),
        2,
        (SkippedEntry(1, "pod-uid-2", "c", "nvidia.com/gpu", NO_RESPONSE),),
    )
    listed = store.to_checkpoint_data()
    assert len(listed) == 2
    assert (tmp_path / "out").read_bytes() == dumps_checkpoint(listed, {})
    assert store.export_checkpoint(tmp_path / "again").left_out == report.left_out


def test_round_trip_survives_reopening(db_path: Path, tmp_path: Path) -> None:
    source = VECTORS / "v2-medium-random-maporder.json"
    with PodStore.open(db_path) as s:
        s.import_checkpoint(source)
    with PodStore.open(db_path, readonly=True) as s:
        s.export_checkpoint(tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == source.read_bytes()


def test_export_is_atomic_and_private(store: PodStore, tmp_path: Path) -> None:
    store.import_checkpoint(VECTORS / "v2-small.json")
    target = tmp_path / "dir" / "kubelet_internal_checkpoint"
    target.parent.mkdir()
    target.write_bytes(b"old contents")
    os.chmod(target, 0o644)
    store.export_checkpoint(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["kubelet_internal_checkpoint"]
    assert read_checkpoint(target).checksum == read_checkpoint(VECTORS / "v2-small.json").checksum


def test_export_of_an_empty_store_writes_null_entries_as_kubelet(
    store: PodStore, tmp_path: Path
) -> None:
    store.export_checkpoint(tmp_path / "cp")
    data = (tmp_path / "cp").read_bytes()
    assert data.startswith(b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}}')
    assert read_checkpoint(tmp_path / "cp").entries == []


def test_export_with_boot_id(store: PodStore, tmp_path: Path) -> None:
    store.export_checkpoint(tmp_path / "cp", boot_id="b0071d")
    assert read_checkpoint(tmp_path / "cp").boot_id == "b0071d"
    assert (tmp_path / "cp").read_bytes().endswith(b',"BootID":"b0071d"}')


def test_strict_import_refuses_a_file_with_undecodable_entries(store: PodStore) -> None:
    prefill(store)
    before = dump(store)
    with pytest.raises(CheckpointFormatError, match=r"PodDeviceEntries\[0\].*strict"):
        store.import_checkpoint(VECTORS / "corrupt-garbage-allocresp.json", strict=True)
    assert dump(store) == before
    report = store.import_checkpoint(VECTORS / "corrupt-garbage-allocresp.json")
    assert [s.index for s in report.skipped] == [0]
    assert report.skipped[0].reason.startswith("AllocResp is not a ContainerAllocateResponse")


def test_merge_inserts_over_existing_entries(store: PodStore) -> None:
    store.insert("keep-pod", "c", "example.com/dev", {0: ["d0"]}, b"")
    store.set_registered_devices({"example.com/dev": ["d0"], "nvidia.com/gpu": ["stale"]})
    report = store.import_checkpoint(VECTORS / "real-tegra.json", merge=True)
    assert report.merged and report.imported == 1
    assert store.pods() == {"keep-pod", "bf52b2cd-b611-4e79-86b1-280b283185c3"}
    # Registered devices are replaced resource by resource.
    assert store.registered_devices() == {"example.com/dev": ["d0"], "nvidia.com/gpu": ["tegra"]}
    # The file's entry goes after the existing one.
    assert [e.pod_uid for e in store.to_checkpoint_data()] == [
        "keep-pod",
        "bf52b2cd-b611-4e79-86b1-280b283185c3",
    ]


def test_oversize_file_is_refused(store: PodStore) -> None:
    prefill(store)
    before = dump(store)
    with pytest.raises(CheckpointFormatError, match="bytes"):
        store.import_checkpoint(VECTORS / "v2-small.json", max_bytes=100)
    assert dump(store) == before


def test_missing_file_is_a_checkpoint_error(store: PodStore, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        store.import_checkpoint(tmp_path / "nope")


def test_bad_arguments(store: PodStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        store.import_checkpoint(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.import_checkpoint(VECTORS / "v2-small.json", max_bytes=0)
    with pytest.raises(InvalidInputError):
        store.export_checkpoint(tmp_path / "cp", boot_id=5)  # type: ignore[arg-type]
    assert not (tmp_path / "cp").exists()


def _mutated(tmp_path: Path, edit: Any) -> Path:
    doc = (VECTORS / "v2-small.json").read_text()
    path = tmp_path / "edited.json"
    path.write_text(edit(doc))
    return path


@pytest.mark.parametrize(
    ("name", "edit", "error"),
    [
        (
            "edited device id",
            lambda d: d.replace("fpga-port-3", "fpga-port-9", 1),
            CheckpointCorruptError,
        ),
        (
            "invalid base64",
            lambda d: d.replace('"AllocResp":"', '"AllocResp":"!', 1),
            CheckpointFormatError,
        ),
        ("numa key x", lambda d: d.replace('"-1":', '"x":', 1), CheckpointFormatError),
        (
            "int64 overflow",
            lambda d: d.replace('"-1":', '"9223372036854775808":', 1),
            CheckpointFormatError,
        ),
        (
            "wrong type",
            lambda d: d.replace('"PodUID":"', '"PodUID":7,"x":"', 1),
            CheckpointFormatError,
        ),
        ("truncated", lambda d: d[: len(d) // 2], CheckpointFormatError),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_corrupted_inputs_raise_and_leave_the_store_unchanged(
    store: PodStore, tmp_path: Path, name: str, edit: Any, error: type[Exception]
) -> None:
    prefill(store)
    before = dump(store)
    with pytest.raises(error):
        store.import_checkpoint(_mutated(tmp_path, edit))
    assert dump(store) == before


# ---- property: store state → export → import → same state ---------------------------------

_ids = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_numa = st.one_of(st.sampled_from([-1, 0, 1, 2, 10]), st.integers(-(2**63), 2**63 - 1))
_devices = st.one_of(
    st.none(), st.dictionaries(_numa, st.one_of(st.none(), st.lists(_ids, max_size=3)), max_size=3)
)
_resp = st.builds(
    lambda envs, cdi: ContainerAllocateResponse(
        envs=envs, cdi_devices=[{"name": n} for n in cdi]
    ).SerializeToString(deterministic=True),
    st.dictionaries(_ids, _ids, max_size=2),
    st.lists(_ids, max_size=2),
)
_entries = st.lists(
    st.tuples(
        st.sampled_from(["p1", "p2", "p<&>"]),
        _ids,
        st.sampled_from(["r/a", "r/b"]),
        _devices,
        _resp,
    ),
    max_size=8,
)
_registered = st.one_of(
    st.none(), st.dictionaries(_ids, st.one_of(st.none(), st.lists(_ids, max_size=3)), max_size=3)
)


@given(entries=_entries, registered=_registered)
def test_store_export_import_gives_the_same_state(
    tmp_path_factory: pytest.TempPathFactory, entries: list[Any], registered: Any
) -> None:
    tmp = tmp_path_factory.mktemp("rt")
    with PodStore.open(tmp / "a.db") as a, PodStore.open(tmp / "b.db") as b:
        for pod, cont, res, devs, resp in entries:
            a.insert(pod, cont, res, devs, resp)
        a.set_registered_devices(registered)
        a.export_checkpoint(tmp / "cp")
        report = b.import_checkpoint(tmp / "cp")
        assert report.imported == len(a.to_checkpoint_data())
        assert dump(b) == dump(a)
        b.export_checkpoint(tmp / "cp2")
        assert (tmp / "cp2").read_bytes() == (tmp / "cp").read_bytes()
        # And the file is what dumps_checkpoint makes of the store's own entries.
        expected = dumps_checkpoint(
            a.to_checkpoint_data() or None,
            None if registered is None else {k: v for k, v in registered.items()},
        )
        assert (tmp / "cp").read_bytes() == expected


def test_from_checkpoint_data_of_an_export_matches_import(store: PodStore, tmp_path: Path) -> None:
    cp = read_checkpoint(VECTORS / "v2-edge.json")
    store.from_checkpoint_data(cp.entries)
    with PodStore.open(tmp_path / "other.db") as other:
        other.import_checkpoint(VECTORS / "v2-edge.json")
        assert dump(store)[0] == dump(other)[0]
    assert all(isinstance(e, PodDevicesEntry) for e in store.to_checkpoint_data())


def test_import_over_the_same_entries_in_another_order_keeps_the_file_order(
    store: PodStore, tmp_path: Path
) -> None:
    source = VECTORS / "v2-small.json"
    cp = read_checkpoint(source)
    # The same entries already in the store, in reverse order.
    store.from_checkpoint_data(list(reversed(cp.entries)))
    store.import_checkpoint(source)
    store.export_checkpoint(tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == source.read_bytes()
