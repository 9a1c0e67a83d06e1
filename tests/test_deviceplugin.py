"""The device plugin API v1beta1 messages: committed module fresh, wire format as kubelet's (§7)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from podstore import deviceplugin as dp

REPO_ROOT = Path(__file__).resolve().parent.parent
X1_HEX = (
    "0a060a01411201310a060a0142120132120a0a022f6d12022f6818011a140a062f6465762f7812062f6465762f"
    "781a02727722060a016b1201762a170a1576656e646f722e636f6d2f636c6173733d64657630"
)

T = FieldDescriptor

# message → [(number, name, type, repeated)], from kubelet-semantics §7.
FIELDS: dict[str, list[tuple[int, str, int, bool]]] = {
    "ContainerAllocateResponse": [
        (1, "envs", T.TYPE_MESSAGE, True),  # map<string,string>
        (2, "mounts", T.TYPE_MESSAGE, True),
        (3, "devices", T.TYPE_MESSAGE, True),
        (4, "annotations", T.TYPE_MESSAGE, True),
        (5, "cdi_devices", T.TYPE_MESSAGE, True),
    ],
    "Mount": [
        (1, "container_path", T.TYPE_STRING, False),
        (2, "host_path", T.TYPE_STRING, False),
        (3, "read_only", T.TYPE_BOOL, False),
    ],
    "DeviceSpec": [
        (1, "container_path", T.TYPE_STRING, False),
        (2, "host_path", T.TYPE_STRING, False),
        (3, "permissions", T.TYPE_STRING, False),
    ],
    "CDIDevice": [(1, "name", T.TYPE_STRING, False)],
    "AllocateResponse": [(1, "container_responses", T.TYPE_MESSAGE, True)],
    "AllocateRequest": [(1, "container_requests", T.TYPE_MESSAGE, True)],
    "ContainerAllocateRequest": [(1, "devices_ids", T.TYPE_STRING, True)],
    "Device": [
        (1, "ID", T.TYPE_STRING, False),
        (2, "health", T.TYPE_STRING, False),
        (3, "topology", T.TYPE_MESSAGE, False),
    ],
    "TopologyInfo": [(1, "nodes", T.TYPE_MESSAGE, True)],
    "NUMANode": [(1, "ID", T.TYPE_INT64, False)],
    "ListAndWatchResponse": [(1, "devices", T.TYPE_MESSAGE, True)],
    "DevicePluginOptions": [
        (1, "pre_start_required", T.TYPE_BOOL, False),
        (2, "get_preferred_allocation_available", T.TYPE_BOOL, False),
    ],
}


def test_committed_module_is_not_stale() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "regen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def test_the_staleness_check_notices_a_change(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "regen_proto.py", tmp_path / "scripts")
    pkg = tmp_path / "podstore" / "deviceplugin"
    pkg.mkdir(parents=True)
    for name in ("api.proto", "api_pb2.py", "api_pb2.pyi"):
        shutil.copy(REPO_ROOT / "podstore" / "deviceplugin" / name, pkg)
    with (pkg / "api.proto").open("a") as f:
        f.write("\nmessage AddedLater {\n  string x = 1;\n}\n")
    out = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "regen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "api_pb2.py" in out.stderr


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers_names_and_types_match_kubelet(message: str) -> None:
    desc = getattr(dp.api_pb2, message).DESCRIPTOR
    assert desc.full_name == f"v1beta1.{message}"
    got = [
        (f.number, f.name, f.type, f.is_repeated)
        for f in sorted(desc.fields, key=lambda f: f.number)
    ]
    assert got == FIELDS[message]


def test_map_fields_are_string_to_string_maps() -> None:
    desc = dp.ContainerAllocateResponse.DESCRIPTOR
    for name in ("envs", "annotations"):
        entry = desc.fields_by_name[name].message_type
        assert entry is not None
        assert entry.GetOptions().map_entry
        assert [(f.number, f.name, f.type) for f in entry.fields] == [
            (1, "key", T.TYPE_STRING),
            (2, "value", T.TYPE_STRING),
        ]


def test_x1_bytes_decode_to_the_documented_response() -> None:
    raw = bytes.fromhex(X1_HEX)
    msg = dp.ContainerAllocateResponse.FromString(raw)
    assert dict(msg.envs) == {"A": "1", "B": "2"}
    assert [(m.container_path, m.host_path, m.read_only) for m in msg.mounts] == [
        ("/m", "/h", True)
    ]
    assert [(d.container_path, d.host_path, d.permissions) for d in msg.devices] == [
        ("/dev/x", "/dev/x", "rw")
    ]
    assert dict(msg.annotations) == {"k": "v"}
    assert [c.name for c in msg.cdi_devices] == ["vendor.com/class=dev0"]
    # Sorted map keys and ascending field numbers reproduce kubelet's bytes exactly.
    assert msg.SerializeToString(deterministic=True) == raw
    # The same bytes as the checkpoint's base64 AllocResp.
    assert base64.b64encode(raw).decode() == (
        "CgYKAUESATEKBgoBQhIBMhIKCgIvbRICL2gYARoUCgYvZGV2L3gSBi9kZXYveBoCcnciBgoBaxIBdioX"
        "ChV2ZW5kb3IuY29tL2NsYXNzPWRldjA="
    )


def test_real_tegra_alloc_resp() -> None:
    raw = base64.b64decode("Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh")
    msg = dp.ContainerAllocateResponse.FromString(raw)
    assert dict(msg.envs) == {"NVIDIA_VISIBLE_DEVICES": "tegra"}


def test_negative_numa_id_is_a_ten_byte_varint() -> None:
    assert dp.NUMANode(ID=-1).SerializeToString() == bytes.fromhex("08ffffffffffffffffff01")
    assert dp.NUMANode.FromString(bytes.fromhex("08ffffffffffffffffff01")).ID == -1
    assert dp.NUMANode(ID=0).SerializeToString() == b""  # proto3 default omitted
    topo = dp.TopologyInfo(nodes=[dp.NUMANode(ID=1)])
    assert dp.Device(topology=topo).SerializeToString() == bytes.fromhex("1a040a020801")


def test_gogo_style_map_entries_with_empty_key_and_value_decode() -> None:
    # gogo writes both key and value even when empty; a missing value is "" too.
    assert dict(dp.ContainerAllocateResponse.FromString(b"\x0a\x04\x0a\x00\x12\x00").envs) == {
        "": ""
    }
    assert dict(dp.ContainerAllocateResponse.FromString(b"\x22\x03\x0a\x01k").annotations) == {
        "k": ""
    }


def test_unknown_fields_are_tolerated() -> None:
    # A newer plugin API may add fields; kubelet's decoders accept them.
    raw = bytes.fromhex("0a060a0141120131") + b"\x4a\x03abc"  # field 9, length-delimited
    assert dict(dp.ContainerAllocateResponse.FromString(raw).envs) == {"A": "1"}


@pytest.mark.parametrize(
    "raw",
    [b"\x00", b"\xff\xff", b"\x0a\x05ab", b"\x0a"],
    ids=["tag-zero", "bad-varint", "truncated-length", "missing-length"],
)
def test_garbage_does_not_decode(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        dp.ContainerAllocateResponse.FromString(raw)


def test_empty_bytes_are_an_empty_response() -> None:
    assert dp.ContainerAllocateResponse.FromString(b"") == dp.ContainerAllocateResponse()


def test_allocate_response_wraps_container_responses() -> None:
    inner = dp.ContainerAllocateResponse.FromString(bytes.fromhex(X1_HEX))
    outer = dp.AllocateResponse(container_responses=[inner])
    raw = outer.SerializeToString(deterministic=True)
    assert raw[:1] == b"\x0a"  # field 1, length-delimited
    assert dp.AllocateResponse.FromString(raw).container_responses[0] == inner
