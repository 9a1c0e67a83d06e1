"""Damaged or hostile checkpoint files raise the documented error, never a stray exception."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

import pytest

from podstore.checkpoint import (
    DEFAULT_MAX_BYTES,
    CheckpointNotFoundError,
    checksum,
    dumps_checkpoint,
    read_checkpoint,
)
from podstore.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    InvalidInputError,
    PodStoreError,
)
from podstore.types import PodDevicesEntry as E

VECTORS = Path(__file__).parent / "vectors"
SMALL = (VECTORS / "v2-small.json").read_bytes()
SMALL_CHECKSUM = 1616683350
# AllocResp values chosen so that their base64 has padding and uses '+' and '/'.
CRAFTED = dumps_checkpoint(
    [
        E("pod-a", "main", "example.com/dev", {-1: ["d0"], 0: ["d1", "d2"]}, b"\x00"),
        E("pod-b", "side", "example.com/dev", {1: ["d3"]}, b"\xfb\xff\xbf"),
    ],
    {"example.com/dev": ["d0", "d1", "d2", "d3"]},
    boot_id="boot",
)


def _format_error(data: bytes) -> str:
    with pytest.raises(CheckpointFormatError) as info:
        read_checkpoint(data)
    return str(info.value)


def test_crafted_base_file_is_valid() -> None:
    assert b'"AllocResp":"AA=="' in CRAFTED
    assert b'"AllocResp":"+/+/"' in CRAFTED
    assert read_checkpoint(CRAFTED).boot_id == "boot"


def test_flipped_checksum() -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(SMALL.replace(b'"Checksum":1616683350', b'"Checksum":1616683351'))
    assert (info.value.expected, info.value.actual) == (1616683351, SMALL_CHECKSUM)
    assert "1616683351" in str(info.value) and "1616683350" in str(info.value)


def test_edited_device_id() -> None:
    edited = re.sub(rb'"DeviceIDs":\{"(-?\d+)":\["(.)', rb'"DeviceIDs":{"\1":["#', SMALL, count=1)
    assert edited != SMALL and len(edited) == len(SMALL)
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(edited)
    assert info.value.expected == SMALL_CHECKSUM
    assert info.value.actual != SMALL_CHECKSUM


def test_edited_registered_device_list_order() -> None:
    edited = CRAFTED.replace(b'["d0","d1","d2","d3"]', b'["d1","d0","d2","d3"]')
    with pytest.raises(CheckpointCorruptError):
        read_checkpoint(edited)


def test_edited_bootid_still_verifies() -> None:
    assert read_checkpoint(CRAFTED.replace(b'"boot"', b'"other"')).boot_id == "other"


@pytest.mark.parametrize("cut", [1, 10, len(SMALL) // 2, len(SMALL) - 1])
def test_truncated_json(cut: int) -> None:
    assert "byte offset" in _format_error(SMALL[:cut])


def test_truncated_at_end_says_unexpected_end() -> None:
    assert "unexpected end of JSON input" in _format_error(SMALL[:-1])


def test_invalid_base64() -> None:
    bad = CRAFTED.replace(b'"AllocResp":"AA=="', b'"AllocResp":"A!=="')
    assert _format_error(bad) == (
        "Data.PodDeviceEntries[0].AllocResp: illegal base64 data: "
        "expected standard base64 with padding"
    )


def test_missing_base64_padding() -> None:
    bad = CRAFTED.replace(b'"AllocResp":"AA=="', b'"AllocResp":"AA"')
    assert "PodDeviceEntries[0].AllocResp: illegal base64" in _format_error(bad)


def test_url_safe_base64() -> None:
    bad = CRAFTED.replace(b'"AllocResp":"+/+/"', b'"AllocResp":"-_-_"')
    assert "PodDeviceEntries[1].AllocResp: illegal base64" in _format_error(bad)


def test_numa_key_x() -> None:
    bad = CRAFTED.replace(b'{"1":["d3"]}', b'{"x":["d3"]}')
    assert (
        _format_error(bad)
        == 'Data.PodDeviceEntries[1].DeviceIDs: NUMA key "x" is not a base-10 int64'
    )


@pytest.mark.parametrize("key", [b"9223372036854775808", b"-9223372036854775809"])
def test_numa_key_beyond_int64(key: bytes) -> None:
    bad = CRAFTED.replace(b'{"1":["d3"]}', b'{"' + key + b'":["d3"]}')
    assert "is not a base-10 int64" in _format_error(bad)


def test_numa_key_at_int64_limit_is_fine_but_changes_the_checksum() -> None:
    edited = CRAFTED.replace(b'{"1":["d3"]}', b'{"9223372036854775807":["d3"]}')
    with pytest.raises(CheckpointCorruptError):
        read_checkpoint(edited)


@pytest.mark.parametrize(
    ("value", "go_type"),
    [(b"1.0", "checksum.Checksum"), (b"-1", "checksum.Checksum"), (b'"1"', "checksum.Checksum")],
)
def test_checksum_not_a_uint64(value: bytes, go_type: str) -> None:
    bad = re.sub(rb'"Checksum":\d+', b'"Checksum":' + value, CRAFTED)
    assert _format_error(bad).endswith(f"into Go value of type {go_type}")


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        (b'{"1":["d3"]}', b'{"1":"d3"}', 'Data.PodDeviceEntries[1].DeviceIDs["1"]'),
        (b'{"1":["d3"]}', b'{"1":[3]}', 'Data.PodDeviceEntries[1].DeviceIDs["1"][0]'),
        (b'"PodUID":"pod-a"', b'"PodUID":17', "Data.PodDeviceEntries[0].PodUID"),
        (
            b'"ContainerName":"side"',
            b'"ContainerName":["side"]',
            "Data.PodDeviceEntries[1].ContainerName",
        ),
        (
            b'"ResourceName":"example.com/dev"',
            b'"ResourceName":true',
            "Data.PodDeviceEntries[0].ResourceName",
        ),
        (b'"AllocResp":"AA=="', b'"AllocResp":{}', "Data.PodDeviceEntries[0].AllocResp"),
        (b'"BootID":"boot"', b'"BootID":5', "BootID"),
        (b'"BootID":"boot"', b'"BootID":{"a":1}', "BootID"),
        (b'"RegisteredDevices":{', b'"RegisteredDevices":[],"x":{', "Data.RegisteredDevices"),
        (b'["d0","d1","d2","d3"]', b'"d0"', 'Data.RegisteredDevices["example.com/dev"]'),
    ],
)
def test_wrong_types(old: bytes, new: bytes, where: str) -> None:
    bad = CRAFTED.replace(old, new, 1)
    assert bad != CRAFTED
    message = _format_error(bad)
    assert message.startswith(where + ": cannot unmarshal"), message


@pytest.mark.parametrize(
    "doc",
    [
        b"[]",
        b'"checkpoint"',
        b"42",
        b"true",
        b'{"Data":"x"}',
        b'{"Data":[]}',
        b'{"Data":{"PodDeviceEntries":{}}}',
        b'{"Data":{"PodDeviceEntries":[1]}}',
    ],
)
def test_wrong_shapes(doc: bytes) -> None:
    assert "cannot unmarshal" in _format_error(doc)


def test_bom() -> None:
    assert "byte order mark" in _format_error(b"\xef\xbb\xbf" + CRAFTED)


def test_trailing_garbage() -> None:
    assert "byte offset" in _format_error(CRAFTED + b"\nx")
    assert "byte offset" in _format_error(CRAFTED + b"\x00")
    assert "byte offset" in _format_error(CRAFTED + CRAFTED)


def test_trailing_whitespace_is_fine() -> None:
    assert read_checkpoint(CRAFTED + b" \n\r\t\n").boot_id == "boot"


def test_invalid_utf8_outside_strings() -> None:
    assert "byte offset 1:" in _format_error(b"{\xff}")


def test_empty_input() -> None:
    assert "unexpected end of JSON input" in _format_error(b"")


def test_v1_file_with_a_bad_checksum_reports_the_v1_checksum() -> None:
    v1 = (VECTORS / "v1-small.json").read_bytes()
    bad = v1.replace(b'"Checksum":1323978195', b'"Checksum":1323978196')
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(bad)
    assert (info.value.expected, info.value.actual) == (1323978196, 1323978195)


def test_oversize_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(SMALL)
    with pytest.raises(CheckpointFormatError, match="more than max_bytes=100"):
        read_checkpoint(path, max_bytes=100)
    with pytest.raises(CheckpointFormatError, match="more than max_bytes=100"):
        read_checkpoint(SMALL, max_bytes=100)
    assert read_checkpoint(path, max_bytes=len(SMALL)).checksum == SMALL_CHECKSUM
    assert DEFAULT_MAX_BYTES == 256 * 1024 * 1024


def test_oversize_stream_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f, contextlib.suppress(BrokenPipeError):
            f.write(SMALL)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with pytest.raises(CheckpointFormatError, match="more than max_bytes=100"):
            read_checkpoint(fifo, max_bytes=100)
    finally:
        writer.join(timeout=10)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CheckpointNotFoundError) as info:
        read_checkpoint(missing)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, CheckpointError)
    assert isinstance(info.value, PodStoreError)
    assert str(missing) in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        read_checkpoint(tmp_path)


def test_path_is_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(SMALL[:-3])
    with pytest.raises(CheckpointFormatError, match=re.escape(str(path) + ": invalid JSON")):
        read_checkpoint(path)
    path.write_bytes(SMALL.replace(b"1616683350", b"1"))
    with pytest.raises(
        CheckpointCorruptError, match=re.escape(str(path) + ": checkpoint is corrupted")
    ):
        read_checkpoint(str(path))


def test_source_of_the_wrong_type() -> None:
    with pytest.raises(InvalidInputError):
        read_checkpoint(12)  # type: ignore[arg-type]


def test_corrupt_error_carries_both_checksums() -> None:
    good = checksum([], {})
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(b'{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":7}')
    assert (info.value.expected, info.value.actual) == (7, good)
