"""The go-spew rendering and FNV-1a hash behind kubelet's checksum (kubelet-semantics §6)."""

from __future__ import annotations

from fnv_hash_fast import fnv1a_32
from hypothesis import given
from hypothesis import strategies as st

from podstore.checkpoint import checksum, render_spew
from podstore.checkpoint.spew import render
from podstore.types import PodDevicesEntry as E


def test_fnv1a_32_reference_values() -> None:
    # Published FNV-1a 32 test vectors.
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


def test_every_byte_value_renders_in_decimal() -> None:
    data = bytes(range(256))
    text = render_spew([E("", "", "", None, data)], None)
    assert "AllocResp:([]uint8)[" + " ".join(str(b) for b in data) + "]}" in text


@given(st.binary(max_size=300))
def test_byte_slices_render_like_go(data: bytes) -> None:
    text = render_spew([E("", "", "", None, data)], None)
    assert text.endswith(
        "AllocResp:([]uint8)["
        + " ".join(map(str, data))
        + "]}] RegisteredDevices:(map[string][]string)<nil>}"
    )


def test_nil_and_empty_values() -> None:
    assert render_spew(None, None) == (
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> "
        "RegisteredDevices:(map[string][]string)<nil>}"
    )
    assert render_spew([E("", "", "", {}, b"")], {}) == (
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
        "[{PodUID:(string) ContainerName:(string) ResourceName:(string) "
        "DeviceIDs:(checkpoint.DevicesPerNUMA)map[] AllocResp:([]uint8)[]}] "
        "RegisteredDevices:(map[string][]string)map[]}"
    )


def test_strings_are_raw_and_maps_sorted() -> None:
    text = render_spew(
        [E('a "b"\n', "c", "r", {10: ["x"], -1: None, 2: []}, None)],
        {"b": ["2", "1"], "B": None, "a": []},
    )
    assert 'PodUID:(string)a "b"\n ContainerName' in text
    assert (
        "DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:<nil> 2:[] 10:[x]] AllocResp:([]uint8)<nil>"
        in text
    )
    assert text.endswith("map[B:<nil> a:[] b:[2 1]]}")


def test_entries_are_separated_by_one_space() -> None:
    text = render_spew([E("1", "", "", None, None), E("2", "", "", None, None)], None)
    assert "AllocResp:([]uint8)<nil>} {PodUID:(string)2 " in text


def test_v1_rendering_renames_types() -> None:
    text = render_spew([E("p", "c", "r", {0: ["b", "a"]}, b"\x01")], {"r": ["a"]}, version=1)
    assert text == (
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
        "[{PodUID:(string)p ContainerName:(string)c ResourceName:(string)r "
        "DeviceIDs:([]string)[b a] AllocResp:([]uint8)[1]}] "
        "RegisteredDevices:(map[string][]string)map[r:[a]]}"
    )
    assert render([E("p", "c", "r", None, None)], None, 1).endswith(
        b"DeviceIDs:([]string)<nil> AllocResp:([]uint8)<nil>}] "
        b"RegisteredDevices:(map[string][]string)<nil>}"
    )


def test_checksum_is_fnv_of_the_rendering() -> None:
    entries = [E("p", "c", "r", {0: ["a"]}, b"\x00\xff")]
    assert checksum(entries, {"r": ["a"]}) == fnv1a_32(render_spew(entries, {"r": ["a"]}).encode())
