"""Go ``encoding/json`` decoding rules that decide what kubelet accepts (kubelet-semantics §5.2a).

Each accepting test writes the checksum Go would compute for the values Go would decode, so
a decoder that decodes anything differently fails verification.
"""

from __future__ import annotations

import pytest

from podstore.checkpoint import Checkpoint, checksum, read_checkpoint
from podstore.checkpoint.gojson import decode_base64, fold_name, parse_int, parse_uint
from podstore.errors import CheckpointCorruptError, CheckpointFormatError
from podstore.types import PodDevicesEntry as E

ENTRY = (
    '{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":""}'
)


def _read(
    text: str | bytes,
    entries: list[E] | None,
    registered: dict[str, list[str] | None] | None,
    version: int = 2,
) -> Checkpoint:
    """Read ``text`` with CS replaced by the checksum of the values Go decodes from it."""
    data = text.encode() if isinstance(text, str) else text
    cs = checksum(entries, registered, version=version)
    cp = read_checkpoint(data.replace(b"CS", str(cs).encode()))
    assert cp.version == version
    assert cp.entries == (entries or [])
    assert cp.entries_null is (entries is None)
    assert cp.registered_devices == registered
    return cp


def _doc(entries: str = "[]", registered: str = "{}", tail: str = "") -> str:
    return (
        f'{{"Data":{{"PodDeviceEntries":{entries},"RegisteredDevices":{registered}}},'
        f'"Checksum":CS{tail}}}'
    )


def _format_error(text: str | bytes) -> str:
    with pytest.raises(CheckpointFormatError) as info:
        read_checkpoint(text.encode() if isinstance(text, str) else text)
    return str(info.value)


# -- field names ----------------------------------------------------------------------------------


def test_keys_match_fields_case_insensitively() -> None:
    text = (
        '{"data":{"podDeviceEntries":[{"poduid":"p","CONTAINERNAME":"c","resourceName":"r",'
        '"deviceids":{"0":["a"]},"ALLOCRESP":"AQ=="}],"REGISTEREDDEVICES":{"r":["a"]}},'
        '"checkSUM":CS,"bootid":"b"}'
    )
    cp = _read(text, [E("p", "c", "r", {0: ["a"]}, b"\x01")], {"r": ["a"]})
    assert cp.boot_id == "b"


def test_long_s_and_kelvin_sign_fold_to_ascii_letters_like_go() -> None:
    # Go's folding maps U+017F to S and U+212A to K; no other non-ASCII rune reaches ASCII.
    text = '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Chec\u212aſum":CS}'
    _read(text, [], {})
    assert fold_name("Podſ") == "PODS"
    assert fold_name("\u212a") == "K"
    assert fold_name("PodU\u0131D") is None  # dotless i is not I under simple folding
    assert fold_name("é") is None


def test_dotless_i_does_not_match_poduid() -> None:
    entry = (
        '{"PodU\u0131D":"x","ContainerName":"c","ResourceName":"r","DeviceIDs":{},"AllocResp":""}'
    )
    _read(_doc(f"[{entry}]"), [E("", "c", "r", {}, b"")], {})


def test_unknown_keys_are_ignored_at_every_level() -> None:
    entry = (
        '{"PodUID":"p","x":{"y":[1,2.5e300,-0,true,null,"s"]},"ContainerName":"c",'
        '"ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":"","Extra":123456789012345678901234567890}'
    )
    text = (
        f'{{"Unknown":[{{}}],"Data":{{"PodDeviceEntries":[{entry}],"Other":"o",'
        f'"RegisteredDevices":{{"r":["a"]}}}},"Checksum":CS,"More":false}}'
    )
    _read(text, [E("p", "c", "r", {0: ["a"]}, b"")], {"r": ["a"]})


# -- duplicates: Go decodes again into the same value ---------------------------------------------


def test_last_duplicate_scalar_wins() -> None:
    entry = (
        '{"PodUID":"a","PodUID":"b","poduid":"c","ContainerName":"x","ContainerName":"y",'
        '"ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":"AQ==","AllocResp":"Ag=="}'
    )
    text = _doc(f"[{entry}]").replace('"Checksum":CS', '"Checksum":1,"Checksum":CS')
    _read(text, [E("c", "y", "r", {0: ["a"]}, b"\x02")], {})


def test_null_leaves_an_earlier_string_or_number_unchanged() -> None:
    entry = (
        '{"PodUID":"a","PodUID":null,"ContainerName":null,"ResourceName":"r",'
        '"DeviceIDs":{"0":["a"]},"AllocResp":""}'
    )
    text = _doc(f"[{entry}]").replace('"Checksum":CS', '"Checksum":CS,"Checksum":null')
    _read(text, [E("a", "", "r", {0: ["a"]}, b"")], {})


def test_duplicate_maps_merge_and_duplicate_map_keys_overwrite() -> None:
    entry = (
        '{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["a"],"1":["b"]},'
        '"DeviceIDs":{"01":["c"],"2":null},"AllocResp":""}'
    )
    registered = '{"r":["a"],"s":["x"]},"RegisteredDevices":{"s":["y"],"t":null}'
    _read(
        _doc(f"[{entry}]", registered),
        [E("p", "c", "r", {0: ["a"], 1: ["c"], 2: None}, b"")],
        {"r": ["a"], "s": ["y"], "t": None},
    )


def test_null_then_object_starts_a_new_map() -> None:
    registered = 'null,"RegisteredDevices":{"t":[]}'
    _read(_doc("[]", registered), [], {"t": []})


def test_duplicate_entry_arrays_decode_over_earlier_elements() -> None:
    # Go decodes a later array element by element into the slice it already holds, so fields
    # the later element does not mention keep their earlier values (golang/go#21092).
    first = (
        '[{"PodUID":"a","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["a"]},'
        '"AllocResp":"AQ=="},{"PodUID":"b","ContainerName":"d","ResourceName":"r",'
        '"DeviceIDs":null,"AllocResp":null}]'
    )
    text = _doc(first).replace(
        '"RegisteredDevices"',
        '"PodDeviceEntries":[{"PodUID":"x","DeviceIDs":{"1":["z"]}}],"RegisteredDevices"',
    )
    _read(text, [E("x", "c", "r", {0: ["a"], 1: ["z"]}, b"\x01")], {})


def test_a_shortened_entry_slice_regrows_over_its_old_elements() -> None:
    first = (
        '[{"PodUID":"a","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["a"]},"AllocResp":""},'
        '{"PodUID":"b","ContainerName":"d","ResourceName":"s","DeviceIDs":null,"AllocResp":"AQ=="}]'
    )
    text = _doc(first).replace(
        '"RegisteredDevices"',
        '"PodDeviceEntries":[{}],"PodDeviceEntries":[{},{"ContainerName":"e"}],"RegisteredDevices"',
    )
    _read(
        text,
        [E("a", "c", "r", {0: ["a"]}, b""), E("b", "e", "s", None, b"\x01")],
        {},
    )


def test_an_empty_array_replaces_the_slice() -> None:
    text = _doc(f"[{ENTRY}]").replace(
        '"RegisteredDevices"', '"PodDeviceEntries":[],"PodDeviceEntries":[{}],"RegisteredDevices"'
    )
    _read(text, [E("", "", "", None, None)], {})


def test_null_entry_element_is_a_zero_entry() -> None:
    _read(_doc("[null]"), [E("", "", "", None, None)], {})


def test_v1_device_list_nulls_keep_earlier_strings_in_a_reused_slice() -> None:
    entry = (
        '{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":["a","b"],'
        '"DeviceIDs":[null],"AllocResp":""}'
    )
    _read(_doc(f"[{entry}]"), [E("p", "c", "r", {0: ["a"]}, b"")], {}, version=1)


# -- missing keys and nulls -----------------------------------------------------------------------


def test_missing_keys_read_as_kubelets_preinitialised_values() -> None:
    cp = _read('{"Checksum":CS}', [], {})
    assert cp.boot_id is None
    _read('{"Data":null,"Checksum":CS}', [], {})
    _read('{"Data":{},"Checksum":CS}', [], {})


def test_missing_entry_fields_are_go_zero_values() -> None:
    _read(_doc("[{}]"), [E("", "", "", None, None)], {})


def test_null_string_fields_are_empty_strings() -> None:
    entry = (
        '{"PodUID":null,"ContainerName":null,"ResourceName":null,"DeviceIDs":null,"AllocResp":null}'
    )
    cp = _read(_doc(f"[{entry}]", tail=',"BootID":null'), [E("", "", "", None, None)], {})
    assert cp.boot_id == ""


def test_null_collections_are_none() -> None:
    cp = _read(_doc("null", "null"), None, None)
    assert cp.entries == []


def test_null_document_keeps_the_preinitialised_values_and_fails_the_checksum() -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(b" null ")
    assert (info.value.expected, info.value.actual) == (0, 2932075448)


def test_empty_and_null_allocresp_and_numa_lists_differ() -> None:
    entry = (
        '{"PodUID":"p","ContainerName":"c","ResourceName":"r",'
        '"DeviceIDs":{"0":[],"1":null},"AllocResp":""}'
    )
    _read(_doc(f"[{entry}]"), [E("p", "c", "r", {0: [], 1: None}, b"")], {})
    assert checksum([E("p", "c", "r", {0: []}, b"")], {}) != checksum(
        [E("p", "c", "r", {0: None}, b"")], {}
    )
    assert checksum([E("p", "c", "r", {}, b"")], {}) != checksum([E("p", "c", "r", {}, None)], {})


def test_null_device_id_in_a_fresh_list_is_an_empty_string() -> None:
    _read(_doc("[]", '{"r":["a",null]}'), [], {"r": ["a", ""]})


# -- NUMA keys: strconv.ParseInt(key, 10, 64) -----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "numa"),
    [
        ("+2", 2),
        ("02", 2),
        ("-0", 0),
        ("-1", -1),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("000000000000000000000000000007", 7),
    ],
)
def test_numa_keys_parse_like_go(key: str, numa: int) -> None:
    entry = f'{{"PodUID":"p","DeviceIDs":{{"{key}":["a"]}}}}'
    _read(_doc(f"[{entry}]"), [E("p", "", "", {numa: ["a"]}, None)], {})


@pytest.mark.parametrize(
    "key",
    [
        "x",
        "",
        " 1",
        "1 ",
        "1_0",
        "0x1",
        "1.0",
        "1e2",
        "+-1",
        "--1",
        "\u0661",
        "9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999999",
    ],
)
def test_bad_numa_key_fails_the_whole_file(key: str) -> None:
    entry = f'{{"PodUID":"p","DeviceIDs":{{"0":["a"],"{key}":["b"]}}}}'
    text = _doc(f"[{ENTRY},{entry}]").replace("CS", "0")
    message = _format_error(text)
    assert "Data.PodDeviceEntries[1].DeviceIDs: NUMA key" in message
    assert "is not a base-10 int64" in message


def test_escaped_numa_key_is_unescaped_first() -> None:
    entry = '{"PodUID":"p","DeviceIDs":{"\\u0031":["a"]}}'
    _read(_doc(f"[{entry}]"), [E("p", "", "", {1: ["a"]}, None)], {})


def test_parse_int_and_uint_helpers() -> None:
    assert parse_int("+0") == 0
    assert parse_int("-") is None
    assert parse_int("128", 8) is None and parse_int("-128", 8) == -128
    assert parse_uint("18446744073709551615") == 2**64 - 1
    assert parse_uint("18446744073709551616") is None
    assert parse_uint("-0") is None and parse_uint("1.0") is None and parse_uint("255", 8) == 255


# -- strings: invalid UTF-8 and lone surrogates become U+FFFD -------------------------------------


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        (b"a\xffb", "a\ufffdb"),
        (b"\xe2\x82", "\ufffd\ufffd"),  # a truncated sequence: one U+FFFD per byte, as Go
        (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),  # an encoded surrogate is invalid UTF-8
        (b"\xc0\xaf", "\ufffd\ufffd"),  # overlong
        (b"\xf4\x90\x80\x80", "\ufffd" * 4),  # beyond U+10FFFF
        ("ü€😀".encode(), "ü€😀"),
    ],
)
def test_invalid_utf8_bytes_each_become_one_replacement_character(raw: bytes, decoded: str) -> None:
    text = _doc("[]", '{"r":["ID"]}').encode().replace(b"ID", raw)
    _read(text, [], {"r": [decoded]})


@pytest.mark.parametrize(
    ("escaped", "decoded"),
    [
        ("\\ud800", "\ufffd"),
        ("\\udc00", "\ufffd"),
        ("\\ud800\\u0041", "\ufffdA"),
        ("\\udc00\\ud800", "\ufffd\ufffd"),
        ("\\ud83d\\ude00", "😀"),
        ("\\ud83dx", "\ufffdx"),
        ("\\u00e9\\u2028\\u0000", "é\u2028\x00"),
    ],
)
def test_lone_surrogate_escapes_each_become_one_replacement_character(
    escaped: str, decoded: str
) -> None:
    entry = f'{{"PodUID":"{escaped}","DeviceIDs":{{"0":["{escaped}"]}}}}'
    _read(
        _doc(f"[{entry}]", f'{{"{escaped}":[]}}'),
        [E(decoded, "", "", {0: [decoded]}, None)],
        {decoded: []},
    )


def test_resource_names_that_differ_only_in_invalid_bytes_collide_last_wins() -> None:
    text = (
        _doc("[]", '{"rX":["a"],"rY":["b"]}').encode().replace(b"X", b"\xff").replace(b"Y", b"\xfe")
    )
    _read(text, [], {"r\ufffd": ["b"]})


def test_raw_control_characters_in_strings_are_rejected() -> None:
    assert "byte offset" in _format_error(_doc("[]", '{"r\tx":[]}').replace("CS", "0"))


# -- AllocResp: base64.StdEncoding, or an array of byte values ------------------------------------


@pytest.mark.parametrize(
    ("b64", "data"),
    [
        ("", b""),
        ("AA==", b"\x00"),
        ("AAA=", b"\x00\x00"),
        ("AQID", b"\x01\x02\x03"),
        ("AB==", b"\x00"),
        ("+/+/", b"\xfb\xff\xbf"),
        ("AQ\\r\\nID", b"\x01\x02\x03"),
        ("AA\\n=\\r=", b"\x00"),
        ("\\u0041\\u0041==", b"\x00"),
    ],
)
def test_allocresp_base64_accepted_like_go(b64: str, data: bytes) -> None:
    entry = f'{{"PodUID":"p","AllocResp":"{b64}"}}'
    _read(_doc(f"[{entry}]"), [E("p", "", "", None, data)], {})


@pytest.mark.parametrize(
    "b64",
    [
        "A",
        "AA",
        "AAA",
        "AA=",
        "AA===",
        "AAAA=",
        "AAAA====",
        "=AAA",
        "A=AA",
        "-_-_",
        "AA==AA==",
        "A A=",
        "QUJD\\t",
        "ü===",
        "AA==\\u0000",
    ],
)
def test_allocresp_base64_rejected_like_go(b64: str) -> None:
    assert decode_base64(b64.replace("\\t", "\t").replace("\\u0000", "\0")) is None
    entry = f'{{"PodUID":"p","AllocResp":"{b64}"}}'
    assert "AllocResp: illegal base64 data" in _format_error(_doc(f"[{entry}]").replace("CS", "0"))


def test_allocresp_may_be_an_array_of_byte_values() -> None:
    entry = '{"PodUID":"p","AllocResp":[10,0,255]}'
    _read(_doc(f"[{entry}]"), [E("p", "", "", None, b"\n\x00\xff")], {})
    entry = '{"PodUID":"p","AllocResp":"AQID","AllocResp":[null,7]}'
    _read(_doc(f"[{entry}]"), [E("p", "", "", None, b"\x01\x07")], {})


@pytest.mark.parametrize("item", ["256", "-1", "1.0", "1e1", '"1"', "true", "[]"])
def test_allocresp_array_items_must_be_uint8(item: str) -> None:
    entry = f'{{"PodUID":"p","AllocResp":[1,{item}]}}'
    assert "AllocResp[1]: cannot unmarshal" in _format_error(_doc(f"[{entry}]").replace("CS", "0"))


# -- Checksum: a JSON integer that fits uint64, compared in full ----------------------------------


@pytest.mark.parametrize(
    "value", ["1.0", "1e3", "-1", "-0", '"1"', "18446744073709551616", "true", "[]"]
)
def test_checksum_must_be_a_uint64_integer(value: str) -> None:
    text = _doc().replace("CS", value)
    assert _format_error(text).startswith("Checksum: cannot unmarshal")


def test_checksum_is_compared_as_a_full_uint64() -> None:
    good = checksum([], {})
    with pytest.raises(CheckpointCorruptError) as info:
        read_checkpoint(_doc().replace("CS", str(good + 2**32)).encode())
    assert (info.value.expected, info.value.actual) == (good + 2**32, good)


# -- syntax ---------------------------------------------------------------------------------------


def test_whitespace_between_tokens_and_around_the_document_is_allowed() -> None:
    text = (
        ' \r\n\t{ "Data" : { "PodDeviceEntries" : [ ] , "RegisteredDevices" : { } } ,'
        ' "Checksum" : CS }\n\n '
    )
    _read(text, [], {})


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ("\ufeff" + _doc(), 0),
        (_doc() + "x", None),
        (_doc() + "{}", None),
        ('{"Data":{},"Checksum":NaN}', 22),
        ('{"Data":{},"Checksum":Infinity}', 22),
        ('{"Data":{},"x":-Infinity,"Checksum":0}', 15),
        ('{"Data":{},"x":[1,2,],"Checksum":0}', None),
        ('{"Data":{},"x":01,"Checksum":0}', None),
        ('{"Data":{},"x":.5,"Checksum":0}', None),
        ("{'Data':{}}", 1),
        ('{"é":1,"x":tru}', None),
        ("", 0),
        ("   ", 3),
    ],
)
def test_syntax_errors_name_the_byte_offset(text: str, offset: int | None) -> None:
    message = _format_error(text.replace("CS", "0"))
    assert "invalid JSON at byte offset" in message
    if offset is not None:
        assert f"byte offset {offset}:" in message


def test_byte_offsets_count_utf8_bytes() -> None:
    message = _format_error('{"éé":1 "x"}')
    assert "byte offset 10:" in message


def test_nesting_up_to_go_limit_is_accepted_in_unknown_fields() -> None:
    for depth in (2000, 10000):
        text = '{"x":' + "[" * (depth - 1) + "]" * (depth - 1) + ',"Data":{},"Checksum":CS}'
        _read(text, [], {})


def test_nesting_beyond_go_limit_is_rejected() -> None:
    text = '{"x":' + "[" * 10000 + "]" * 10000 + ',"Data":{},"Checksum":0}'
    assert "exceeded max depth" in _format_error(text)


# -- v1 fallback ----------------------------------------------------------------------------------


def test_v1_entry_lists_go_under_numa_0() -> None:
    entry = (
        '{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":["b","a"],"AllocResp":""}'
    )
    cp = _read(_doc(f"[{entry}]"), [E("p", "c", "r", {0: ["b", "a"]}, b"")], {}, version=1)
    assert cp.boot_id is None


def test_v1_file_whose_device_lists_are_all_null_parses_as_v2_then_verifies_as_v1() -> None:
    entry = '{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":null,"AllocResp":""}'
    cp = _read(_doc(f"[{entry}]"), [E("p", "c", "r", {0: None}, b"")], {}, version=1)
    assert checksum(cp.entries, {}, version=1) != checksum([E("p", "c", "r", None, b"")], {})


def test_file_with_no_entries_has_the_same_checksum_under_both_rules() -> None:
    assert checksum(None, {"r": ["a"]}, version=1) == checksum(None, {"r": ["a"]})
    assert checksum([], {}, version=1) == checksum([], {})


def test_v1_rule_renames_entry_type_names_even_inside_data() -> None:
    entry = '{"PodUID":"PodDevicesEntryV1","DeviceIDs":["checkpointDataV1"]}'
    cp = _read(
        _doc(f"[{entry}]"),
        [E("PodDevicesEntryV1", "", "", {0: ["checkpointDataV1"]}, None)],
        {},
        version=1,
    )
    from podstore.checkpoint import render_spew

    text = render_spew(cp.entries, {}, version=1)
    assert "PodUID:(string)PodDevicesEntry ContainerName" in text
    assert "DeviceIDs:([]string)[checkpointDataV1]" in text


def test_neither_format_reports_the_v2_error() -> None:
    entry = '{"PodUID":"p","DeviceIDs":[1]}'
    message = _format_error(_doc(f"[{entry}]").replace("CS", "0"))
    assert message == (
        "Data.PodDeviceEntries[0].DeviceIDs: cannot unmarshal array into Go value of type "
        "checkpoint.DevicesPerNUMA"
    )


# -- BootID (kubernetes PR #137919): outside Data and not hashed ----------------------------------


def test_bootid_is_read_when_present_and_none_when_absent() -> None:
    assert _read(_doc(tail=',"BootID":"abc"'), [], {}).boot_id == "abc"
    assert _read(_doc(tail=',"BootID":""'), [], {}).boot_id == ""
    assert _read(_doc(), [], {}).boot_id is None
    # Inside Data it is just an unknown key.
    text = '{"Data":{"BootID":5,"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":CS}'
    assert _read(text, [], {}).boot_id is None


def test_bootid_of_the_wrong_type_fails_the_parse() -> None:
    text = _doc(f"[{ENTRY}]", tail=',"BootID":5').replace("CS", "0")
    assert _format_error(text) == "BootID: cannot unmarshal number 5 into Go value of type string"
