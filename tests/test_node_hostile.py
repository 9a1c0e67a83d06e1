"""Damaged or hostile CPU, memory and DRA checkpoints, and bad values handed to the writers,
raise the documented error — one line, naming the field or the byte offset — never a stray
exception; and Go's decoding quirks (case-insensitive keys, last duplicate wins, invalid UTF-8)
are honoured."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fnv_hash_fast import fnv1a_32

from podstore.checkpoint import (
    CPUManagerState,
    DRAClaim,
    DRADevice,
    DRAState,
    MemoryBlock,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
    detect_kind,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
    read_cpu_state,
    read_dra_state,
    read_memory_state,
    read_node_checkpoint,
)
from podstore.errors import (
    CheckpointCorruptError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    InvalidInputError,
)

Reader = Callable[..., Any]


def _format_error(read: Reader, data: bytes | str) -> str:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    with pytest.raises(CheckpointFormatError) as info:
        read(raw)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- sizes, syntax, nesting -----------------------------------------------------------------------


@pytest.mark.parametrize("read", [read_cpu_state, read_memory_state, read_dra_state])
def test_size_limit_for_bytes_and_files(read: Reader, tmp_path: Path) -> None:
    data = b'{"policyName":"none","defaultCpuSet":"","checksum":0}'
    with pytest.raises(CheckpointFormatError, match="max_bytes=10"):
        read(data, max_bytes=10)
    path = tmp_path / "state"
    path.write_bytes(data)
    with pytest.raises(CheckpointFormatError, match="max_bytes=10"):
        read(path, max_bytes=10)
    with pytest.raises(CheckpointNotFoundError):
        read(tmp_path / "absent")


@pytest.mark.parametrize("read", [read_cpu_state, read_memory_state, read_dra_state])
def test_deep_nesting_is_a_syntax_error(read: Reader) -> None:
    depth = 20000
    doc = '{"policyName":' + "[" * depth + "]" * depth + "}"
    assert "max depth" in _format_error(read, doc)


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ('{"policyName":"none"', "unexpected end of JSON input"),
        ('{"policyName":"none"} x', "Extra data"),
        ('\ufeff{"policyName":"none"}', "byte order mark"),
        ("{'policyName':1}", "byte offset 1"),
        ('{"checksum":NaN}', "byte offset"),
    ],
)
def test_syntax_errors_name_the_offset(doc: str, fragment: str) -> None:
    assert fragment in _format_error(read_cpu_state, doc)


# -- wrong types and numbers, named by field ----------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (
            '{"policyName":1,"checksum":0}',
            "policyName: cannot unmarshal number 1 into Go value of type string",
        ),
        ('{"entries":"x","checksum":0}', "entries: cannot unmarshal string"),
        ('{"entries":{"p":{"c":4}},"checksum":0}', 'entries["p"]["c"]: cannot unmarshal number 4'),
        (
            '{"checksum":1.0}',
            "checksum: cannot unmarshal number 1.0 into Go value of type checksum.Checksum",
        ),
        (
            '{"checksum":18446744073709551616}',
            "checksum: cannot unmarshal number 18446744073709551616",
        ),
        ('{"checksum":-1}', "checksum: cannot unmarshal number -1"),
        ('{"checksum":"1"}', "checksum: cannot unmarshal string"),
        ("[]", "cannot unmarshal array into Go value of type state.CPUManagerCheckpointV3"),
    ],
)
def test_cpu_type_errors_name_the_field(doc: str, fragment: str) -> None:
    assert fragment in _format_error(read_cpu_state, doc)


@pytest.mark.parametrize("pod_entry", ['"4-6"', '{"cpuSet":"x"}'])
def test_bad_pod_entries_fall_back_to_v2_as_kubelet_does(pod_entry: str) -> None:
    # v3 cannot decode them (PodEntry.UnmarshalJSON fails); v2 has no podEntries and ignores
    # them: a stored 0 is then accepted unverified, any other checksum is v2's to match.
    state = read_cpu_state(b'{"podEntries":{"p":%s},"checksum":0}' % pod_entry.encode())
    assert (state.version, state.verified, state.pod_entries) == (2, False, {})
    with pytest.raises(CheckpointCorruptError, match="format v2"):
        read_cpu_state(b'{"podEntries":{"p":%s},"checksum":5}' % pod_entry.encode())
    # In the v4 format there is no fallback: the same value inside data is a format error.
    data = f'{{"podEntries":{{"p":{pod_entry}}}}}'
    doc = json.dumps({"data": data, "dataChecksum": fnv1a_32(b"(string)" + data.encode())})
    message = _format_error(read_cpu_state, doc)
    assert 'data (v4): podEntries["p"]: ' in message
    assert ("podEntryJSON" in message) or ('failed to parse cpuset: invalid cpuset "x"' in message)


@pytest.mark.parametrize(
    ("default", "entry", "where"),
    [
        ("0-", "1", "defaultCpuSet"),
        ("1", "70000", 'entries["pod"]["c"]'),
        ("1", "2-1", 'entries["pod"]["c"]'),
        ("1", "1,,2", 'entries["pod"]["c"]'),
    ],
)
def test_bad_cpusets_are_named_after_the_checksum_passed(
    default: str, entry: str, where: str
) -> None:
    # checksum 0: accepted unverified by the v2 rule, so the cpuset is what fails (as in kubelet)
    doc = json.dumps(
        {
            "policyName": "static",
            "defaultCpuSet": default,
            "entries": {"pod": {"c": entry}},
            "checksum": 0,
        }
    )
    message = _format_error(read_cpu_state, doc)
    assert message.startswith(f"{where}: invalid cpuset ")


def test_v4_errors() -> None:
    good = '{"policyName":"none","defaultCpuSet":"1"}'
    dcs = fnv1a_32(b"(string)" + good.encode())
    bad_inner = '{"entries":{"p":"x"}}'
    doc = json.dumps(
        {"data": bad_inner, "dataChecksum": fnv1a_32(b"(string)" + bad_inner.encode())}
    )
    assert 'data (v4): entries["p"]: cannot unmarshal string' in _format_error(read_cpu_state, doc)
    doc = json.dumps({"data": "{", "dataChecksum": fnv1a_32(b"(string){")})
    assert "data (v4): invalid JSON" in _format_error(read_cpu_state, doc)
    # The v3 copy still has to decode, though nothing of it is used.
    doc = json.dumps({"entries": "x", "data": good, "dataChecksum": dcs})
    assert "(v4): entries: cannot unmarshal string" in _format_error(read_cpu_state, doc)
    with pytest.raises(CheckpointCorruptError) as info:
        read_cpu_state(json.dumps({"data": good, "dataChecksum": dcs + 1}).encode())
    assert (info.value.expected, info.value.actual) == (dcs + 1, dcs)


def test_cpu_corrupt_error_carries_expected_and_actual() -> None:
    doc = b'{"policyName":"none","defaultCpuSet":"4-6","entries":{},"checksum":1337}'
    with pytest.raises(CheckpointCorruptError) as info:
        read_cpu_state(doc)
    # v2 rule (the newest layout this file fits) of the upstream vector with checksum 354655845
    assert (info.value.expected, info.value.actual) == (1337, 354655845)
    assert "stored checksum 1337, computed 354655845" in str(info.value)


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (
            '{"machineState":{"x":null},"checksum":0}',
            'machineState["x"]: cannot unmarshal number x into Go value of type int',
        ),
        (
            '{"machineState":{"99999999999999999999":null},"checksum":0}',
            "cannot unmarshal number 99999999999999999999",
        ),
        (
            '{"machineState":{"0":{"numberOfAssignments":1.5}},"checksum":0}',
            'machineState["0"].numberOfAssignments: cannot unmarshal number 1.5',
        ),
        (
            '{"machineState":{"0":{"memoryMap":{"memory":"x"}}},"checksum":0}',
            'machineState["0"].memoryMap["memory"]: cannot unmarshal string into Go value of type '
            "state.MemoryTable",
        ),
        (
            '{"machineState":{"0":{"memoryMap":{"memory":{"free":-1}}}},"checksum":0}',
            ".free: cannot unmarshal number -1 into Go value of type uint64",
        ),
        (
            '{"machineState":{"0":{"cells":["a"]}},"checksum":0}',
            'machineState["0"].cells[0]: cannot unmarshal string into Go value of type int',
        ),
        (
            '{"entries":{"p":{"c":[{"size":18446744073709551616}]}},"checksum":0}',
            'entries["p"]["c"][0].size: cannot unmarshal number 18446744073709551616',
        ),
        (
            '{"entries":{"p":{"c":{}}},"checksum":0}',
            'entries["p"]["c"]: cannot unmarshal object into Go value of type []state.Block',
        ),
    ],
)
def test_memory_type_errors_name_the_field(doc: str, fragment: str) -> None:
    assert fragment in _format_error(read_memory_state, doc)


def _dra(data: str, crc: int | None = None) -> bytes:
    checksum = zlib.crc32(data.encode()) if crc is None else crc
    return json.dumps({"Data": data, "Checksum": checksum}).encode()


def test_dra_errors() -> None:
    assert "Checksum: cannot unmarshal number 4294967296 into Go value of type uint32" in (
        _format_error(read_dra_state, '{"Data":"","Checksum":4294967296}')
    )
    assert "Data: cannot unmarshal number" in _format_error(
        read_dra_state, '{"Data":1,"Checksum":0}'
    )
    assert "Data: invalid JSON" in _format_error(read_dra_state, _dra("{"))
    assert "Entries[0].PodUIDs: cannot unmarshal array into Go value of type sets.Set[string]" in (
        _format_error(read_dra_state, _dra('{"Entries":[{"PodUIDs":["a"]}]}'))
    )
    assert 'Entries[0].DriverState["d"].Devices[0].ShareID: cannot unmarshal number' in (
        _format_error(
            read_dra_state, _dra('{"Entries":[{"DriverState":{"d":{"Devices":[{"ShareID":1}]}}}]}')
        )
    )
    with pytest.raises(CheckpointCorruptError) as info:
        read_dra_state(_dra("{}", 7))
    assert (info.value.expected, info.value.actual) == (7, zlib.crc32(b"{}"))


def test_dra_v1_structured_handles_are_refused_by_name() -> None:
    doc = (
        '{"version":"v1","entries":[{"DriverName":"d","ResourceHandles":[{"driverName":"d",'
        '"structuredData":{"nodeName":"n"}}]}],"checksum":1}'
    )
    message = _format_error(read_dra_state, doc)
    assert "DRA manager checkpoint (v1 (classic))" in message
    assert "structuredData" in message and "not supported" in message


def test_dra_crc_covers_the_decoded_data() -> None:
    data = '{"Entries":[{"ClaimUID":"u","ClaimName":"A<b>"}]}'
    crc = zlib.crc32(data.encode())
    escaped = json.dumps({"Data": data, "Checksum": crc}).replace("A<b>", "\\u0041\\u003cb\\u003e")
    state = read_dra_state(escaped.encode())
    assert state.claims is not None and state.claims[0].claim_name == "A<b>"


# -- Go's decoding quirks -----------------------------------------------------------------------


def test_keys_match_case_insensitively_and_the_last_duplicate_wins() -> None:
    # upstream vector (v1 rule, checksum 1694838852) with its keys respelled
    for doc in (
        '{"POLICYNAME":"none","DefaultCPUSet":"1-3","CheckSum":1694838852}',
        '{"policyName":"x","policyName":"none","defaultCpuSet":"1-3","checksum":1694838852}',
        '{"policyName":"none","defaultCpuSet":"1-3","checkſum":1694838852}',  # long s folds to s
    ):
        state = read_cpu_state(doc.encode())
        assert (state.policy_name, state.default_cpu_set, state.version) == ("none", {1, 2, 3}, 1)


def test_invalid_utf8_is_hashed_as_the_replacement_character() -> None:
    text = (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)a\ufffdb DefaultCPUSet:(string) "
        "Entries:(map[string]map[string]string)map[] Checksum:(checksum.Checksum)0}"
    )
    doc = b'{"policyName":"a\xffb","defaultCpuSet":"","checksum":%d}' % fnv1a_32(text.encode())
    state = read_cpu_state(doc)
    assert (state.policy_name, state.version) == ("a\ufffdb", 2)


def test_a_null_document_is_an_unverified_empty_state_as_kubelet_reads_it() -> None:
    state = read_cpu_state(b"null")
    assert (state.policy_name, state.version, state.verified) == ("", 2, False)


# -- kinds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ('{"foo":1}', "not a kubelet checkpoint of any known kind"),
        ("[1,2]", "not a kubelet checkpoint of any known kind"),
        ("not json", "byte offset 0"),
    ],
)
def test_no_kind_fits(doc: str, fragment: str) -> None:
    assert fragment in _format_error(detect_kind, doc)
    assert fragment in _format_error(read_node_checkpoint, doc)


def test_unknown_kind_argument() -> None:
    with pytest.raises(InvalidInputError, match="kind must be"):
        read_node_checkpoint(b"{}", "gpu")


def test_a_policy_only_file_is_read_as_the_first_kind_that_verifies() -> None:
    # Fits cpu and memory by its keys; the cpu v1 rule verifies it.
    cp = read_node_checkpoint(b'{"policyName":"none","defaultCpuSet":"1-3","checksum":1694838852}')
    assert cp.kind == "cpu"
    cp = read_node_checkpoint(b'{"policyName":"None","checksum":0}')
    assert (cp.kind, cp.verified) == ("cpu", False)
    # memory-real-none.json without its (empty) machineState: no cpu rule gives its checksum,
    # the memory v1 rule does, the missing key hashing as the empty map kubelet starts from.
    cp = read_node_checkpoint(b'{"policyName":"None","checksum":4236770233}')
    assert (cp.kind, cp.version, cp.verified) == ("memory", "v1", True)


# -- writers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "fragment"),
    [
        (CPUManagerState("static", frozenset({-1})), "CPU id -1"),
        (CPUManagerState("static", frozenset({70000})), "CPU id 70000"),
        (CPUManagerState("static", "1-3"), "default_cpu_set must be a set"),  # type: ignore[arg-type]
        (CPUManagerState(1, frozenset()), "policy_name must be a str"),  # type: ignore[arg-type]
        (CPUManagerState("s", frozenset(), {"p\udcff": {}}), "lone surrogate"),
        (CPUManagerState("s", frozenset(), version=1), "version must be 2, 3 or 4"),
        (
            CPUManagerState("s", frozenset(), pod_entries={"p": frozenset({1})}, version=2),
            "need version 3 or 4",
        ),
        (CPUManagerState("s", frozenset(), legacy_entries={"c": frozenset({1})}), "legacy_entries"),
        (CPUManagerState("s", frozenset(), version=3, type_name="Other"), "type_name must be"),
    ],
)
def test_cpu_writer_refuses_bad_values(state: CPUManagerState, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        dumps_cpu_state(state)


@pytest.mark.parametrize(
    ("state", "fragment"),
    [
        (MemoryManagerState("s", {"0": None}), "machine_state key '0' must be an int64"),  # type: ignore[dict-item]
        (
            MemoryManagerState("s", {0: NUMANodeState(1, {"memory": MemoryTable(total=-1)})}),
            "total must be a uint64",
        ),
        (
            MemoryManagerState("s", {0: NUMANodeState(1, {"memory": MemoryTable(free=1 << 64)})}),
            "free must be a uint64",
        ),
        (MemoryManagerState("s", {0: NUMANodeState(cells=["0"])}), "cells\\[0\\] must be an int64"),  # type: ignore[list-item]
        (
            MemoryManagerState("s", entries={"p": {"c": [MemoryBlock([0], "memory", -5)]}}),
            "size must be a uint64",
        ),
        (MemoryManagerState("s", entries={"p": {"c": [("x",)]}}), "must be a MemoryBlock"),  # type: ignore[list-item]
        (MemoryManagerState("s", pod_entries={"p": []}, version=1), "need version 2 or 3"),
        (MemoryManagerState("s", version=4), "version must be 1, 2 or 3"),
    ],
)
def test_memory_writer_refuses_bad_values(state: MemoryManagerState, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        dumps_memory_state(state)


@pytest.mark.parametrize(
    ("state", "fragment"),
    [
        (DRAState([], version="v0"), "version must be 'data' or 'v1'"),
        (DRAState([], version="v1", share_ids=True), "the v1 format's devices have no ShareID"),
        (
            DRAState([DRAClaim("u", "n", "ns", driver_name="d")], version="v1"),
            "classic DRA v1 layout",
        ),
        (DRAState([DRAClaim("u", "n", "ns", driver_name="d")]), "classic DRA v1 layout"),
        (
            DRAState(
                [DRAClaim("u", "n", "ns", driver_state={"d": [DRADevice("p", "x", share_id="s")]})]
            ),
            "share_ids=False",
        ),
        (DRAState([DRAClaim("u", "n", "ns", pod_uids="abc")]), "pod_uids must be a set"),  # type: ignore[arg-type]
        (
            DRAState(
                [
                    DRAClaim(
                        "u", "n", "ns", driver_state={"d": [DRADevice("p", "x", request_names="r")]}
                    )
                ]
            ),
            "request_names must be a list",
        ),  # type: ignore[arg-type]
        (DRAState(["claim"]), "must be a DRAClaim"),  # type: ignore[list-item]
        (DRAState([], entries_key="Claims"), "entries_key must be"),
    ],
)
def test_dra_writer_refuses_bad_values(state: DRAState, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        dumps_dra_state(state)


def test_repeated_keys_decode_over_earlier_values_as_go_does() -> None:
    """A repeated array decodes element by element over the earlier one (Go issue 21092): a
    shorter array cuts the slice, a longer one grows it back over the old elements, which keep
    the fields the new ones do not mention; a repeated map key replaces the whole value."""
    from podstore.checkpoint.dra_v1 import V1_STRUCTURED
    from podstore.checkpoint.versions import Layout, decode_layout, parse

    layout = Layout("test", V1_STRUCTURED, lambda: ["v1", [], 0], ())
    doc = (
        '{"entries":[{"ClaimUID":"a","ClaimName":"x"},{"ClaimUID":"b","Namespace":"n"}],'
        '"entries":[{"ClaimName":"y"}]}'
    )
    value = decode_layout(layout, parse(doc, ""))
    assert [c[:3] for c in value[1]] == [["a", "y", ""]]
    doc = doc[:-1] + ',"entries":[{},{"ClaimName":"z"}]}'
    value = decode_layout(layout, parse(doc, ""))
    assert [c[:3] for c in value[1]] == [["a", "y", ""], ["b", "z", "n"]]
    doc = (
        '{"entries":[{"DriverState":{"d":{"Devices":[{"PoolName":"p"}]}}}],'
        '"entries":[{"DriverState":{"d":{}}}]}'
    )
    value = decode_layout(layout, parse(doc, ""))
    assert value[1][0][4] == {"d": [None]}  # the map value was decoded afresh
    state = read_memory_state(
        b'{"entries":{"p":{"c":[{"numaAffinity":[0,1,2],"numaAffinity":[5],"size":1}]}},'
        b'"checksum":0}'
    )
    assert state.entries == {"p": {"c": [MemoryBlock([5], "", 1)]}}
