"""dumps_checkpoint writes Go's bytes, and whatever it writes reads back to the same values."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podstore.checkpoint import checksum, dumps_checkpoint, read_checkpoint, render_spew
from podstore.errors import InvalidInputError
from podstore.types import PodDevicesEntry as E

# Characters that stress Go's escaping, spew's raw rendering and the v1 renaming quirk.
SPECIAL = [
    '"',
    "\\",
    "/",
    "<",
    ">",
    "&",
    "\u2028",
    "\u2029",
    "\x00",
    "\x01",
    "\x08",
    "\x0c",
    "\n",
    "\r",
    "\t",
    "\x1f",
    "\x7f",
    "\x80",
    "\ufffd",
    "\ufeff",
    "😀",
    "👩\u200d💻",
    "é",
    "设",
    " ",
    ":",
    "[",
    "]",
    "{",
    "}",
    "map[",
    "<nil>",
    "PodDevicesEntryV1",
    "checkpointDataV1",
]
# Lone surrogates are excluded here: they read back as U+FFFD (tested on their own below).
character = st.characters(codec="utf-8")
text = st.lists(st.one_of(character, st.sampled_from(SPECIAL)), max_size=6).map("".join)
numa = st.one_of(st.sampled_from([-1, 0, 1, 2, 3, 10, 11]), st.integers(-(2**63), 2**63 - 1))
ids = st.one_of(st.none(), st.lists(text, max_size=4))
entry = st.builds(
    E,
    pod_uid=text,
    container_name=text,
    resource_name=text,
    device_ids=st.one_of(st.none(), st.dictionaries(numa, ids, max_size=4)),
    alloc_resp=st.one_of(st.none(), st.binary(max_size=48)),
)
entries = st.one_of(st.none(), st.lists(entry, max_size=5))
registered = st.one_of(st.none(), st.dictionaries(text, ids, max_size=4))
boot_ids = st.one_of(st.none(), text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, registered, boot_ids)
def test_dumps_then_read_gives_the_same_values(
    entries: list[E] | None, registered: dict[str, list[str] | None] | None, boot_id: str | None
) -> None:
    data = dumps_checkpoint(entries, registered, boot_id)
    cp = read_checkpoint(data)
    assert cp.version == 2
    assert cp.entries == (entries or [])
    assert cp.entries_null is (entries is None)
    assert cp.registered_devices == registered
    assert cp.boot_id == (boot_id or None)
    assert cp.checksum == checksum(entries, registered)
    # Exporting what was read gives the same bytes.
    assert (
        dumps_checkpoint(None if cp.entries_null else cp.entries, cp.registered_devices, cp.boot_id)
        == data
    )
    # Python's json agrees on the structure, and Go's HTML-safe escapes left no raw <, >, &.
    parsed = json.loads(data)
    assert list(parsed) == ["Data", "Checksum"] + (["BootID"] if boot_id else [])
    for raw in (b"<", b">", b"&", "\u2028".encode(), "\u2029".encode()):
        assert raw not in data
    assert not data.endswith(b"\n")


v1_entry = st.builds(
    E,
    pod_uid=text,
    container_name=text,
    resource_name=text,
    device_ids=ids.map(lambda v: {0: v}),
    alloc_resp=st.one_of(st.none(), st.binary(max_size=48)),
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), st.lists(v1_entry, max_size=4)), registered)
def test_legacy_v1_files_read_back_with_devices_under_numa_0(
    entries: list[E] | None, registered: dict[str, list[str] | None] | None
) -> None:
    def v1_json(e: E) -> dict[str, object]:
        resp = None if e.alloc_resp is None else base64.b64encode(e.alloc_resp).decode()
        flat = (e.device_ids or {}).get(0)
        return {
            "PodUID": e.pod_uid,
            "ContainerName": e.container_name,
            "ResourceName": e.resource_name,
            "DeviceIDs": flat,
            "AllocResp": resp,
        }

    doc = {
        "Data": {
            "PodDeviceEntries": None if entries is None else [v1_json(e) for e in entries],
            "RegisteredDevices": registered,
        },
        "Checksum": checksum(entries, registered, version=1),
    }
    cp = read_checkpoint(json.dumps(doc).encode())
    # Without entries both rules usually agree and the v2 reading wins; the v1 rule renames
    # "PodDevicesEntryV1" anywhere in the text, even in a resource name, and then only v1 fits.
    same = not entries and checksum(entries, registered) == checksum(entries, registered, version=1)
    assert cp.version == (2 if same else 1)
    assert cp.entries == (entries or [])
    assert cp.entries_null is (entries is None)
    assert cp.registered_devices == registered
    rendered = render_spew(entries, registered, version=1)
    assert "checkpointDataV1){" not in rendered


def test_go_string_escapes() -> None:
    s = '"\\/<>&\u2028\u2029\x00\x01\x08\x0c\n\r\t\x1f\x7fé😀\ufffd'
    data = dumps_checkpoint(None, {s: [s]})
    escaped = (
        '"\\"\\\\/\\u003c\\u003e\\u0026\\u2028\\u2029\\u0000\\u0001\\b\\f\\n\\r\\t\\u001f\x7fé😀\ufffd"'
    ).encode()
    assert (
        data
        == b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{'
        + escaped
        + b":["
        + escaped
        + b']}},"Checksum":'
        + str(checksum(None, {s: [s]})).encode()
        + b"}"
    )
    assert read_checkpoint(data).registered_devices == {s: [s]}


def test_lone_surrogates_are_written_as_escaped_replacement_characters() -> None:
    data = dumps_checkpoint(
        [E("a\udc80", "c", "r", {0: ["\ud800x"]}, None)], {"r": ["\udfff"]}, "b\udcff"
    )
    assert b'"PodUID":"a\\ufffd"' in data
    assert b'"0":["\\ufffdx"]' in data
    assert b'"BootID":"b\\ufffd"' in data
    cp = read_checkpoint(data)
    # The checksum covers what kubelet decodes, so the file verifies.
    assert cp.entries == [E("a\ufffd", "c", "r", {0: ["\ufffdx"]}, None)]
    assert cp.registered_devices == {"r": ["\ufffd"]}
    assert cp.boot_id == "b\ufffd"
    assert (
        checksum([E("a\udc80", "c", "r", {0: ["\ud800x"]}, None)], {"r": ["\udfff"]}) == cp.checksum
    )


any_text = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(["\ud800", "\udc80", "\udfff"])), max_size=5
)


def _fffd(s: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(any_text, st.dictionaries(numa, st.lists(any_text, max_size=3), max_size=2)),
        max_size=3,
    ),
    st.dictionaries(any_text, st.lists(any_text, max_size=3), max_size=3),
)
def test_lone_surrogates_read_back_as_replacement_characters(
    raw: list[tuple[str, dict[int, list[str] | None]]], registered: dict[str, list[str]]
) -> None:
    entries = [E(uid, uid, uid, devs, b"") for uid, devs in raw]
    clean_registered = {_fffd(k): [_fffd(x) for x in v] for k, v in registered.items()}
    if len(clean_registered) < len(registered):
        with pytest.raises(InvalidInputError):
            dumps_checkpoint(entries, registered)
        return
    cp = read_checkpoint(dumps_checkpoint(entries, registered))
    assert cp.entries == [
        E(
            _fffd(uid),
            _fffd(uid),
            _fffd(uid),
            {k: [_fffd(x) for x in v or ()] for k, v in devs.items()},
            b"",
        )
        for uid, devs in raw
    ]
    assert cp.registered_devices == clean_registered


def test_resource_names_colliding_after_replacement_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="registered_devices"):
        dumps_checkpoint(None, {name: [] for name in ("r\udc80", "r\udc81")})


def test_numa_keys_are_written_sorted_as_strings() -> None:
    devs = {
        2: ["c"],
        10: ["d"],
        -1: ["a"],
        0: ["b"],
        1: None,
        -2: [],
        2**63 - 1: ["x"],
        -(2**63): ["y"],
    }
    data = dumps_checkpoint([E("p", "c", "r", devs, b"")], {})
    assert (
        b'"DeviceIDs":{"-1":["a"],"-2":[],"-9223372036854775808":["y"],"0":["b"],"1":null,"10":["d"],'
        b'"2":["c"],"9223372036854775807":["x"]}'
    ) in data
    assert read_checkpoint(data).entries[0].device_ids == devs


def test_resource_names_are_sorted_bytewise() -> None:
    data = dumps_checkpoint(
        None, {"é": [], "b": [], "B": [], "a/b": [], "a": [], "😀": [], "\uffff": []}
    )
    keys = list(json.loads(data)["Data"]["RegisteredDevices"])
    assert keys == sorted(keys, key=lambda k: k.encode())
    assert keys == ["B", "a", "a/b", "b", "é", "\uffff", "😀"]


def test_layout_of_empty_and_null_values() -> None:
    assert dumps_checkpoint(None, None) == (
        b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1944006890}'
    )
    assert dumps_checkpoint([], {}) == (
        b'{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":2932075448}'
    )
    assert dumps_checkpoint([E("", "", "", None, None)], {"r": None}, "") == (
        b'{"Data":{"PodDeviceEntries":[{"PodUID":"","ContainerName":"","ResourceName":"",'
        b'"DeviceIDs":null,"AllocResp":null}],"RegisteredDevices":{"r":null}},"Checksum":'
        + str(checksum([E("", "", "", None, None)], {"r": None})).encode()
        + b"}"
    )


def test_bootid_follows_the_checksum_and_is_not_hashed() -> None:
    plain = dumps_checkpoint([], {})
    with_boot = dumps_checkpoint([], {}, boot_id="b<1>")
    assert with_boot == plain[:-1] + b',"BootID":"b\\u003c1\\u003e"}'


def test_alloc_resp_is_standard_base64_with_padding() -> None:
    data = dumps_checkpoint([E("p", "c", "r", {}, b"\xfb\xff\xbf\x00")], None)
    assert b'"AllocResp":"+/+/AA=="' in data


def test_sequences_and_bytes_like_values_are_accepted() -> None:
    entry = E("p", "c", "r", {0: ("a", "b")}, bytearray(b"\x01"))  # type: ignore[dict-item,arg-type]
    data = dumps_checkpoint((entry,), {"r": ("a",)})
    cp = read_checkpoint(data)
    assert cp.entries == [E("p", "c", "r", {0: ["a", "b"]}, b"\x01")]
    assert cp.registered_devices == {"r": ["a"]}


@pytest.mark.parametrize(
    ("entries", "registered", "message"),
    [
        ("abc", {}, "entries must be a sequence"),
        ([("p", "c", "r", None, None)], {}, "not a PodDevicesEntry"),
        ([E(1, "c", "r", None, None)], {}, r"entries\[0\].pod_uid must be a str"),  # type: ignore[arg-type]
        ([E("p", "c", "r", {True: []}, None)], {}, "NUMA id True"),
        ([E("p", "c", "r", {"0": []}, None)], {}, "NUMA id '0'"),  # type: ignore[dict-item]
        ([E("p", "c", "r", {2**63: []}, None)], {}, "within int64"),
        ([E("p", "c", "r", {0: "ab"}, None)], {}, r"device_ids\[0\] must be a list"),  # type: ignore[dict-item]
        ([E("p", "c", "r", {0: ["a", 1]}, None)], {}, r"device_ids\[0\]\[1\] must be a str"),  # type: ignore[list-item]
        ([E("p", "c", "r", [], None)], {}, "must be a mapping"),  # type: ignore[arg-type]
        ([E("p", "c", "r", None, "AA==")], {}, "alloc_resp must be bytes"),  # type: ignore[arg-type]
        ([], [], "registered_devices must be a mapping"),
        ([], {1: []}, "key 1 must be a str"),
        ([], {"r": "abc"}, "must be a list of str"),
    ],
)
def test_bad_values_raise_invalid_input(entries: object, registered: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        dumps_checkpoint(entries, registered)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=message):
        checksum(entries, registered)  # type: ignore[arg-type]


def test_bad_boot_id_and_version() -> None:
    with pytest.raises(InvalidInputError, match="boot_id"):
        dumps_checkpoint([], {}, 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="version"):
        checksum([], {}, version=3)
    with pytest.raises(InvalidInputError, match="NUMA 0"):
        checksum([E("p", "c", "r", {1: ["a"]}, None)], {}, version=1)


def test_inputs_are_not_modified() -> None:
    devs: dict[int, object] = {1: ["b"], 0: ("a",)}
    entries = [E("p\udc80", "c", "r", devs, bytearray(b"x"))]  # type: ignore[arg-type]
    registered = {"r\udc80": ["a\ud800"]}
    dumps_checkpoint(entries, registered)
    assert entries[0].device_ids == {1: ["b"], 0: ("a",)}
    resp: object = entries[0].alloc_resp
    assert type(resp) is bytearray and resp == b"x"
    assert registered == {"r\udc80": ["a\ud800"]}
    assert list(devs) == [1, 0]
