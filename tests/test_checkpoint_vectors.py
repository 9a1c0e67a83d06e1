"""Every file in tests/vectors/ gets kubelet's verdict and decodes as its expect file says.

The vectors (and MANIFEST.json, README.md) are copies of the team's shared set; the expect file
beside each one was produced by a Go generator using go-spew 1.1.1, the version kubelet pins.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import DecodeError

from podstore.checkpoint import (
    Checkpoint,
    checksum,
    dumps_checkpoint,
    read_checkpoint,
    render_spew,
)
from podstore.deviceplugin import ContainerAllocateResponse
from podstore.errors import CheckpointCorruptError, CheckpointFormatError

VECTORS = Path(__file__).parent / "vectors"
MANIFEST = json.loads((VECTORS / "MANIFEST.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = MANIFEST["vectors"]
ACCEPTED = [c for c in CASES if c["importer_must"] == "accept"]
# Files kubelet itself wrote or that the generator wrote in kubelet's compact form.
ROUND_TRIP = [c for c in ACCEPTED if c["file"].startswith(("v2-", "real-"))]


def _ids(case: dict[str, Any]) -> str:
    return str(case["file"])


def _expect(case: dict[str, Any]) -> dict[str, Any]:
    return json.loads((VECTORS / case["expect"]).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _hashed(cp: Checkpoint) -> list[Any] | None:
    return None if cp.entries_null else cp.entries


def _as_expect(msg: ContainerAllocateResponse) -> dict[str, Any]:
    return {
        "envs": dict(msg.envs),
        "mounts": [
            {"container_path": m.container_path, "host_path": m.host_path, "read_only": m.read_only}
            for m in msg.mounts
        ],
        "devices": [
            {
                "container_path": d.container_path,
                "host_path": d.host_path,
                "permissions": d.permissions,
            }
            for d in msg.devices
        ],
        "annotations": dict(msg.annotations),
        "cdi_devices": [{"name": c.name} for c in msg.cdi_devices],
    }


def test_the_copied_set_is_complete() -> None:
    listed = {c["file"] for c in CASES} | {c["expect"] for c in CASES}
    # Files only: node/ holds the CPU, memory and DRA vectors (tests/test_node_vectors.py).
    present = {p.name for p in VECTORS.iterdir() if p.is_file()} - {"MANIFEST.json", "README.md"}
    assert listed == present
    assert len(CASES) == 23


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_copy_matches_the_expect_file(case: dict[str, Any]) -> None:
    data = (VECTORS / case["file"]).read_bytes()
    exp = _expect(case)
    assert hashlib.sha256(data).hexdigest() == exp["file_sha256"]
    assert len(data) == exp["file_bytes"]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_verdict_matches_kubelet(case: dict[str, Any]) -> None:
    path = VECTORS / case["file"]
    must = case["importer_must"]
    if must == "reject-parse":
        with pytest.raises(CheckpointFormatError, match="byte offset"):
            read_checkpoint(path)
    elif must == "reject-checksum":
        with pytest.raises(CheckpointCorruptError) as info:
            read_checkpoint(path)
        assert info.value.expected == case["stored_checksum"]
        assert info.value.actual == case["checksum"]
    else:
        assert must == "accept"
        cp = read_checkpoint(path)
        assert f"v{cp.version}" == case["format"]
        assert cp.checksum == case["stored_checksum"] == case["checksum"]
        assert len(cp.entries) == case["num_entries"]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_reading_bytes_gives_the_same_verdict(case: dict[str, Any]) -> None:
    path = VECTORS / case["file"]
    try:
        from_path: object = read_checkpoint(path)
    except (CheckpointFormatError, CheckpointCorruptError) as e:
        from_path = type(e)
    try:
        from_bytes: object = read_checkpoint(path.read_bytes())
    except (CheckpointFormatError, CheckpointCorruptError) as e:
        from_bytes = type(e)
    assert from_bytes == from_path


@pytest.mark.parametrize("case", ACCEPTED, ids=_ids)
def test_accepted_file_decodes_as_expected(case: dict[str, Any]) -> None:
    exp = _expect(case)
    cp = read_checkpoint(VECTORS / case["file"])

    assert checksum(_hashed(cp), cp.registered_devices, version=cp.version) == exp["checksum"]
    assert cp.entries_null is exp["pod_device_entries_is_null"]
    assert cp.registered_devices == exp["registered_devices"]
    if cp.version == 1:
        assert cp.boot_id is None and exp["boot_id"] is None
    else:
        # The expect files show Go's zero value "" for an absent BootID.
        assert (cp.boot_id or "") == exp["boot_id"]

    text = render_spew(_hashed(cp), cp.registered_devices, version=cp.version)
    if "hashed_string" in exp:
        assert text == exp["hashed_string"]
    assert len(text.encode()) == exp["hashed_string_bytes"]
    assert hashlib.sha256(text.encode()).hexdigest() == exp["hashed_string_sha256"]

    assert len(cp.entries) == len(exp["entries"]) == exp["num_entries"]
    undecodable = []
    for i, (got, want) in enumerate(zip(cp.entries, exp["entries"], strict=True)):
        assert want["index"] == i
        assert (got.pod_uid, got.container_name, got.resource_name) == (
            want["pod_uid"],
            want["container_name"],
            want["resource_name"],
        )
        if cp.version == 1:
            # kubelet puts all of a v1 entry's devices under NUMA 0.
            assert got.device_ids == {0: want["device_ids"]}
        elif want["device_ids"] is None:
            assert got.device_ids is None
        else:
            assert got.device_ids == {int(k): v for k, v in want["device_ids"].items()}

        if want["alloc_resp_b64"] is None:
            assert got.alloc_resp is None
        else:
            assert got.alloc_resp is not None
            assert base64.b64encode(got.alloc_resp).decode() == want["alloc_resp_b64"]
        assert len(got.alloc_resp or b"") == want["alloc_resp_bytes"]

        try:
            msg = ContainerAllocateResponse.FromString(got.alloc_resp or b"")
        except DecodeError:
            undecodable.append(i)
            assert not want["alloc_resp_ok"]
            assert not want["kubelet_restores_entry"]
            continue
        assert want["alloc_resp_ok"] and want["kubelet_restores_entry"]
        assert _as_expect(msg) == want["alloc_resp"]
    assert undecodable == exp["kubelet_skips_entries"] == case["kubelet_skips_entries"]
    assert len(cp.entries) - len(undecodable) == exp["num_entries_restorable"]


@pytest.mark.parametrize("case", ROUND_TRIP, ids=_ids)
def test_kubelet_form_files_export_byte_identical(case: dict[str, Any]) -> None:
    data = (VECTORS / case["file"]).read_bytes()
    cp = read_checkpoint(data)
    assert dumps_checkpoint(_hashed(cp), cp.registered_devices, cp.boot_id) == data


def test_bootid_vector_round_trips_with_its_bootid() -> None:
    data = (VECTORS / "v2-bootid.json").read_bytes()
    cp = read_checkpoint(data)
    assert cp.boot_id == "3b2d0c4e-1111-4a4a-9b9b-5c5c5c5c5c5c"
    assert data.endswith(b',"BootID":"3b2d0c4e-1111-4a4a-9b9b-5c5c5c5c5c5c"}')
    # BootID is not hashed: dropping it changes nothing but the tail.
    without = dumps_checkpoint(_hashed(cp), cp.registered_devices)
    assert without == data[: data.rindex(b',"BootID"')] + b"}"


@pytest.mark.parametrize("case", [c for c in ACCEPTED if c["format"] == "v1"], ids=_ids)
def test_v1_file_exports_as_a_v2_file_with_the_same_entries(case: dict[str, Any]) -> None:
    cp = read_checkpoint(VECTORS / case["file"])
    again = read_checkpoint(dumps_checkpoint(_hashed(cp), cp.registered_devices))
    assert again.version == 2
    assert again.entries == cp.entries
    assert again.registered_devices == cp.registered_devices


def test_corrupt_flip_differs_from_v2_small_only_in_the_checksum() -> None:
    good = (VECTORS / "v2-small.json").read_bytes()
    bad = (VECTORS / "corrupt-flip-checksum.json").read_bytes()
    assert good.replace(b"1616683350", b"1616683355") == bad
