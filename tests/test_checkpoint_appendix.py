"""The documented checksum vectors (kubelet-semantics §6.6 and Appendix A), confirmed with Go."""

from __future__ import annotations

import pytest

from podstore.checkpoint import checksum, dumps_checkpoint, read_checkpoint, render_spew
from podstore.deviceplugin import ContainerAllocateResponse
from podstore.errors import CheckpointCorruptError

R1 = (
    '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":'
    '["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}'
)
R2 = (
    '{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3",'
    '"ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},'
    '"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],'
    '"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}'
)
# (name, Data document with "Checksum":0 or none, checksum Go computes for it)
SYNTHETIC = [
    ("E1", '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":0}', 2932075448),
    ("E2", '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}', 1944006890),
    (
        "E3",
        '{"Data":{"PodDeviceEntries":[{"PodUID":"pod-1","ContainerName":"","ResourceName":'
        '"example.com/dev","DeviceIDs":{"10":["d10"],"2":["d2"],"-1":["x","y"],"0":[],"1":null},'
        '"AllocResp":""}],"RegisteredDevices":{"example.com/dev":["d10","d2","x","y"]}},'
        '"Checksum":0}',
        3026029794,
    ),
    (
        "E4",
        '{"Data":{"PodDeviceEntries":[{"PodUID":"pod-2","ContainerName":"c","ResourceName":"r",'
        '"DeviceIDs":null,"AllocResp":null}],"RegisteredDevices":{"z.com/r":[],'
        '"a.com/r":["b","a"],"A.com/r":null}},"Checksum":0}',
        4000599141,
    ),
    (
        "E5",
        '{"Data":{"PodDeviceEntries":[{"PodUID":"p q]","ContainerName":"ü<&>","ResourceName":"r",'
        '"DeviceIDs":{"0":["a b","c:d"]},"AllocResp":"CgsKA0ZPTxIEYmFyMQ=="},{"PodUID":"pod-0",'
        '"ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["e"]},"AllocResp":"AA=="}]},'
        '"Checksum":0}',
        3064312060,
    ),
    ("E6", '{"Data":{"RegisteredDevices":{"r":["a"]}}}', 3096876023),
]
V1 = (
    '{"Data":{"PodDeviceEntries":[{"PodUID":"pod-1","ContainerName":"c1","ResourceName":'
    '"example.com/dev","DeviceIDs":["d2","d1"],"AllocResp":"CgsKA0ZPTxIEYmFyMQ=="}],'
    '"RegisteredDevices":{"example.com/dev":["d1","d2","d3"]}},"Checksum":0}'
)
X1 = (
    '{"Data":{"PodDeviceEntries":[{"PodUID":"11111111-2222-3333-4444-555555555555",'
    '"ContainerName":"main","ResourceName":"vendor.com/dev","DeviceIDs":{"-1":["dev2"],'
    '"0":["dev0"],"1":["dev0","dev1"]},"AllocResp":"CgYKAUESATEKBgoBQhIBMhIKCgIvbRICL2gYARoUCgYv'
    'ZGV2L3gSBi9kZXYveBoCcnciBgoBaxIBdioXChV2ZW5kb3IuY29tL2NsYXNzPWRldjA="}],'
    '"RegisteredDevices":{"other.io/x":[],"vendor.com/dev":["dev0","dev1","dev2","dev3"]}},'
    '"Checksum":1498915749}'
)


def _with_checksum(doc: str, value: int) -> bytes:
    if '"Checksum":0' in doc:
        return doc.replace('"Checksum":0', f'"Checksum":{value}').encode()
    return (doc[:-1] + f',"Checksum":{value}}}').encode()


@pytest.mark.parametrize(("doc", "stored"), [(R1, 3952659280), (R2, 3660592824)], ids=["R1", "R2"])
def test_real_files_verify_and_export_unchanged(doc: str, stored: int) -> None:
    cp = read_checkpoint(doc.encode())
    assert (cp.version, cp.checksum) == (2, stored)
    entries = None if cp.entries_null else cp.entries
    assert checksum(entries, cp.registered_devices) == stored
    assert dumps_checkpoint(entries, cp.registered_devices) == doc.encode()


def test_r1_has_the_same_checksum_under_the_v1_rule() -> None:
    cp = read_checkpoint(R1.encode())
    assert checksum(None, cp.registered_devices, version=1) == 3952659280


def test_r2_renders_as_the_documented_spew_text() -> None:
    cp = read_checkpoint(R2.encode())
    assert render_spew(cp.entries, cp.registered_devices) == (
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
        "[{PodUID:(string)bf52b2cd-b611-4e79-86b1-280b283185c3 ContainerName:(string)check "
        "ResourceName:(string)nvidia.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[tegra]] "
        "AllocResp:([]uint8)[10 31 10 22 78 86 73 68 73 65 95 86 73 83 73 66 76 69 95 68 69 86 73 "
        "67 69 83 18 5 116 101 103 114 97]}] RegisteredDevices:(map[string][]string)"
        "map[nvidia.com/gpu:[tegra]]}"
    )
    assert dict(ContainerAllocateResponse.FromString(cp.entries[0].alloc_resp or b"").envs) == {
        "NVIDIA_VISIBLE_DEVICES": "tegra"
    }


@pytest.mark.parametrize(("name", "doc", "expected"), SYNTHETIC, ids=[s[0] for s in SYNTHETIC])
def test_synthetic_vectors_have_the_go_checksum(name: str, doc: str, expected: int) -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(doc.encode())
    assert (info.value.expected, info.value.actual) == (0, expected)

    cp = read_checkpoint(_with_checksum(doc, expected))
    assert (cp.version, cp.checksum) == (2, expected)
    assert checksum(None if cp.entries_null else cp.entries, cp.registered_devices) == expected


def test_e3_spew_sorts_numa_ids_numerically_and_json_sorts_them_as_strings() -> None:
    cp = read_checkpoint(_with_checksum(SYNTHETIC[2][1], 3026029794))
    assert (
        "DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[x y] 0:[] 1:<nil> 2:[d2] 10:[d10]] "
        "AllocResp:([]uint8)[]"
    ) in render_spew(cp.entries, cp.registered_devices)
    out = dumps_checkpoint(cp.entries, cp.registered_devices)
    assert b'"DeviceIDs":{"-1":["x","y"],"0":[],"1":null,"10":["d10"],"2":["d2"]}' in out
    assert b'"AllocResp":""' in out


def test_e5_and_e6_missing_keys_hash_as_empty_not_nil() -> None:
    e5 = read_checkpoint(_with_checksum(SYNTHETIC[4][1], 3064312060))
    assert e5.registered_devices == {}
    assert e5.entries[0].container_name == "ü<&>"
    e6 = read_checkpoint(_with_checksum(SYNTHETIC[5][1], 3096876023))
    assert (e6.entries, e6.entries_null) == ([], False)


def test_v1_vector_uses_the_legacy_rule() -> None:
    # Parses only as v1; the v1 checksum is the one that fails.
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(V1.encode())
    assert (info.value.expected, info.value.actual) == (0, 1534763759)

    cp = read_checkpoint(V1.replace('"Checksum":0', '"Checksum":1534763759').encode())
    assert cp.version == 1
    assert cp.entries[0].device_ids == {0: ["d2", "d1"]}
    assert checksum(cp.entries, cp.registered_devices, version=1) == 1534763759
    assert "DeviceIDs:([]string)[d2 d1]" in render_spew(
        cp.entries, cp.registered_devices, version=1
    )


def test_x1_end_to_end() -> None:
    data = X1.encode()
    cp = read_checkpoint(data)
    assert cp.checksum == checksum(cp.entries, cp.registered_devices) == 1498915749
    assert dumps_checkpoint(cp.entries, cp.registered_devices) == data
    resp = cp.entries[0].alloc_resp or b""
    assert resp.hex() == (
        "0a060a01411201310a060a0142120132120a0a022f6d12022f6818011a140a062f6465762f7812062f6465"
        "762f781a02727722060a016b1201762a170a1576656e646f722e636f6d2f636c6173733d64657630"
    )
    msg = ContainerAllocateResponse.FromString(resp)
    assert dict(msg.envs) == {"A": "1", "B": "2"}
    assert [(m.container_path, m.host_path, m.read_only) for m in msg.mounts] == [
        ("/m", "/h", True)
    ]
    assert [(d.container_path, d.host_path, d.permissions) for d in msg.devices] == [
        ("/dev/x", "/dev/x", "rw")
    ]
    assert dict(msg.annotations) == {"k": "v"}
    assert [c.name for c in msg.cdi_devices] == ["vendor.com/class=dev0"]
