"""Kubelet's CPU manager checkpoint (``cpu_manager_state``), read and written as kubelet does.

Versions v1–v4 are told apart by shape and checksum, never a version field (docs/node-files.md).
The hashed type name is ``CPUManagerCheckpoint`` (kubernetes#86689) or, in some kubelets' files,
the versioned name. A file with ``data`` is v4 only (kubelet does not fall back); else v3, v2,
v1 in turn, as 1.18–1.35 kubelets did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.cpuset import MAX_CPU_ID, CPUSetError, format_cpuset, parse_cpuset
from podstore.checkpoint.files import DEFAULT_MAX_BYTES
from podstore.checkpoint.godecode import DecodeError, decode, key_text
from podstore.checkpoint.gotypes import CHECKSUM, EMPTY, INT, STRING, Field, Struct, map_of
from podstore.checkpoint.values import utf8_text as _text
from podstore.checkpoint.versions import (
    DATA_FIELDS,
    Layout,
    first_verified,
    has_key,
    read_data_format,
    read_tree,
    spew_rule,
    string_field,
    uint_field,
)
from podstore.errors import CheckpointFormatError, InvalidInputError

#: The file's name in kubelet's root directory.
FILE_NAME = "cpu_manager_state"
#: The version kubelet writes today.
CURRENT_VERSION = 4
#: The type name kubelet puts in the hashed text of v1–v3 files it writes.
LEGACY_TYPE_NAME = "CPUManagerCheckpoint"


@dataclass
class CPUManagerState:
    """A verified ``cpu_manager_state``: ``entries`` pod → container → exclusive CPUs,
    ``pod_entries`` (v3, v4) pod → CPUs, ``legacy_entries`` (v1) container id → CPUs (kubelet
    maps those through its running containers, which a file alone cannot). ``version`` and
    ``type_name`` say how it was written; ``checksum``/``verified`` as in MemoryManagerState.
    ``legacy_copy`` (v4 only) is the shape of the copy beside ``data``: ``"v2"`` the embedded
    v2 kubelet 1.37 writes (its own v2 checksum, no ``podEntries``), ``"v3"`` the reverted
    kubernetes#137820 design (v3 fields, checksum 0), ``"none"`` no copy at all.
    """

    policy_name: str
    default_cpu_set: frozenset[int]
    entries: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    pod_entries: dict[str, frozenset[int]] = field(default_factory=dict)
    legacy_entries: dict[str, frozenset[int]] = field(default_factory=dict)
    version: int = CURRENT_VERSION
    type_name: str = LEGACY_TYPE_NAME
    checksum: int = 0
    verified: bool = True
    legacy_copy: str = "v2"


#: The shapes of a v4 file's legacy copy (:attr:`CPUManagerState.legacy_copy`).
LEGACY_COPIES = ("v2", "v3", "none")
_OUTER_KEYS = ("POLICYNAME", "DEFAULTCPUSET", "ENTRIES", "PODENTRIES", "CHECKSUM")

# -- Go types -----------------------------------------------------------------------------------

_CPUSET = Struct("cpuset.CPUSet", (Field("elems", map_of(INT, EMPTY)),))
_POD_ENTRY_JSON = Struct("state.podEntryJSON", (Field("CPUSet", STRING, "cpuSet", True),))


def _cpuset_value(cpus: frozenset[int]) -> list[Any]:
    return [dict.fromkeys(sorted(cpus), ())]


def _pod_entry_unmarshal(cur: Any, v: Any) -> Any:
    # PodEntry.UnmarshalJSON: decode into {cpuSet string}, then cpuset.Parse (null too).
    text = decode(_POD_ENTRY_JSON, _POD_ENTRY_JSON.zero(), v)[0]
    try:
        return [_cpuset_value(parse_cpuset(text))]
    except CPUSetError as e:
        raise DecodeError(f"failed to parse cpuset: {e}") from None


_POD_ENTRY = Struct(
    "state.PodEntry", (Field("CPUSet", _CPUSET, "cpuSet", True),), unmarshal=_pod_entry_unmarshal
)
_POD_ASSIGNMENTS = map_of(STRING, _POD_ENTRY, "state.PodCPUAssignments")
_ENTRIES = map_of(STRING, map_of(STRING, STRING))
_ENTRIES_V1 = map_of(STRING, STRING)
_POLICY = Field("PolicyName", STRING, "policyName")
_DEFAULT = Field("DefaultCPUSet", STRING, "defaultCpuSet")
_CHECKSUM = Field("Checksum", CHECKSUM, "checksum")
_ENTRIES_FIELD = Field("Entries", _ENTRIES, "entries", True)
_POD_ENTRIES_FIELD = Field("PodEntries", _POD_ASSIGNMENTS, "podEntries", True)

V1 = Struct(
    "state.CPUManagerCheckpointV1",
    (_POLICY, _DEFAULT, Field("Entries", _ENTRIES_V1, "entries", True), _CHECKSUM),
)
V2 = Struct("state.CPUManagerCheckpointV2", (_POLICY, _DEFAULT, _ENTRIES_FIELD, _CHECKSUM))
V3 = Struct(
    "state.CPUManagerCheckpointV3",
    (_POLICY, _DEFAULT, _ENTRIES_FIELD, _POD_ENTRIES_FIELD, _CHECKSUM),
)
DATA = Struct(
    "state.CPUManagerCheckpointData", (_POLICY, _DEFAULT, _ENTRIES_FIELD, _POD_ENTRIES_FIELD)
)
V4 = Struct(
    "state.CPUManagerCheckpoint",
    (_POLICY, _DEFAULT, _ENTRIES_FIELD, _POD_ENTRIES_FIELD, _CHECKSUM, *DATA_FIELDS),
)


# Kubelet pre-initialises the maps before decoding (a missing key hashes as map[]).
_LAYOUTS = (
    Layout(
        "v3",
        V3,
        lambda: ["", "", {}, {}, 0],
        (spew_rule(V3, LEGACY_TYPE_NAME), spew_rule(V3, "CPUManagerCheckpointV3")),
        fits=lambda tree: has_key(tree, "PODENTRIES"),
    ),
    Layout(
        "v2",
        V2,
        lambda: ["", "", {}, 0],
        (spew_rule(V2, LEGACY_TYPE_NAME), spew_rule(V2, "CPUManagerCheckpointV2")),
        accepts_zero=True,
        # v2 is v3 without podEntries, which it ignores.
        from_newer=lambda v3: [v3[0], v3[1], v3[2], v3[4]],
    ),
    Layout(
        "v1", V1, lambda: ["", "", {}, 0], (spew_rule(V1, LEGACY_TYPE_NAME),), accepts_zero=True
    ),
)


# -- reading ------------------------------------------------------------------------------------


@collector_paused()
def read_cpu_state(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> CPUManagerState:
    """Read and verify a ``cpu_manager_state`` from a path or from the file's bytes.

    Raises CheckpointCorruptError when no checksum rule matches, CheckpointFormatError for a
    file of no version (naming the offset or field), an invalid cpuset or more than
    ``max_bytes``, and the reading errors of :func:`podstore.checkpoint.read_checkpoint`.
    """
    return cpu_state_from_tree(*read_tree(source, max_bytes))


@collector_paused()
def cpu_state_from_tree(tree: Any, origin: str = "") -> CPUManagerState:
    """:func:`read_cpu_state` of a document parsed by :func:`.gojson.parse`."""
    if string_field(tree, "DATA") or uint_field(tree, "DATACHECKSUM"):
        return _read_v4(tree, origin)
    found = first_verified(tree, _LAYOUTS, "cpu manager", origin)
    value = found.value
    label = found.layout.label
    state = CPUManagerState(
        policy_name=value[0],
        default_cpu_set=_cpus(value[1], "defaultCpuSet", origin),
        version=int(label[1:]),
        type_name=found.rule or LEGACY_TYPE_NAME,
        checksum=found.checksum,
        verified=found.rule is not None,
    )
    if label == "v1":
        state.legacy_entries = {
            cid: _cpus(text, f"entries{key_text(cid)}", origin) for cid, text in value[2].items()
        }
    else:
        state.entries = _entries(value[2], origin)
    if label == "v3":
        state.pod_entries = _pod_entries(value[3])
    return state


_V4_LAYOUT = Layout("v4", V4, lambda: ["", "", {}, {}, 0, "", 0], ())
_DATA_LAYOUT = Layout("v4 data", DATA, lambda: ["", "", {}, {}], ())


def _read_v4(tree: Any, origin: str) -> CPUManagerState:
    inner, stored = read_data_format(tree, _V4_LAYOUT, _DATA_LAYOUT, "cpu manager", origin)
    return CPUManagerState(
        policy_name=inner[0],
        default_cpu_set=_cpus(inner[1], "data.defaultCpuSet", origin),
        entries=_entries(inner[2], origin, "data."),
        pod_entries=_pod_entries(inner[3]),
        version=4,
        checksum=stored,
        legacy_copy=_legacy_copy(tree),
    )


def _legacy_copy(tree: Any) -> str:
    # Told by shape alone: kubelet reads only ``data``, so the copy's values never matter.
    if not any(has_key(tree, k) for k in _OUTER_KEYS):
        return "none"
    if has_key(tree, "PODENTRIES") or uint_field(tree, "CHECKSUM") == 0:
        return "v3"
    return "v2"


def _cpus(text: str, where: str, origin: str) -> frozenset[int]:
    try:
        return parse_cpuset(text)
    except CPUSetError as e:
        raise CheckpointFormatError(f"{origin}{where}: {e}") from None


def _entries(
    entries: dict[str, dict[str, str] | None], origin: str, prefix: str = ""
) -> dict[str, dict[str, frozenset[int]]]:
    out: dict[str, dict[str, frozenset[int]]] = {}
    for pod, containers in entries.items():
        inner = out[pod] = {}
        for name, text in (containers or {}).items():
            inner[name] = _cpus(text, f"{prefix}entries{key_text(pod)}{key_text(name)}", origin)
    return out


def _pod_entries(pod_entries: dict[str, list[Any]]) -> dict[str, frozenset[int]]:
    return {pod: frozenset(entry[0][0]) for pod, entry in pod_entries.items()}


# -- writing ------------------------------------------------------------------------------------


@collector_paused()
def dumps_cpu_state(state: CPUManagerState) -> bytes:
    """The bytes kubelet writes for ``state`` in ``state.version`` (2–4), checksum included
    (v2, v3 hash ``state.type_name``; v4: ``data`` and ``dataChecksum`` beside the legacy copy
    ``state.legacy_copy`` names: an embedded v2 with its v2 checksum under the legacy type
    name, as kubelet 1.37 writes it, a v3 copy with checksum 0, or none).

    Raises :class:`InvalidInputError` for a version that cannot hold the state (v1 entries
    keyed by container id; pod entries in v2), an unknown ``legacy_copy`` or values of the
    wrong type.
    """
    version = state.version
    if version not in (2, 3, 4):
        raise InvalidInputError(f"version must be 2, 3 or 4 to write, not {version!r}")
    if version == 4 and state.legacy_copy not in LEGACY_COPIES:
        raise InvalidInputError(
            f"legacy_copy must be one of {', '.join(LEGACY_COPIES)}, not {state.legacy_copy!r}"
        )
    if state.legacy_entries:
        raise InvalidInputError(
            "legacy_entries (v1, keyed by container id) cannot be written; "
            "move them to entries by pod UID and container name first"
        )
    if version == 2 and state.pod_entries:
        raise InvalidInputError("pod_entries need version 3 or 4 (v2 has no podEntries)")
    policy = _text(state.policy_name, "policy_name")
    default = format_cpuset(_cpu_ids(state.default_cpu_set, "default_cpu_set"))
    entries = {
        _text(pod, "entries key"): {
            _text(name, f"entries[{pod!r}] key"): format_cpuset(
                _cpu_ids(cpus, f"entries[{pod!r}][{name!r}]")
            )
            for name, cpus in _mapping(containers, f"entries[{pod!r}]").items()
        }
        for pod, containers in _mapping(state.entries, "entries").items()
    }
    pods = {
        _text(pod, "pod_entries key"): _cpu_ids(cpus, f"pod_entries[{pod!r}]")
        for pod, cpus in _mapping(state.pod_entries, "pod_entries").items()
    }
    doc: dict[str, Any] = {"policyName": policy, "defaultCpuSet": default}
    if entries:
        doc["entries"] = {pod: dict(sorted(entries[pod].items())) for pod in sorted(entries)}
    if version >= 3 and pods:
        # PodEntry.MarshalJSON writes {"cpuSet": …}, omitting an empty set.
        doc["podEntries"] = {
            pod: {"cpuSet": format_cpuset(pods[pod])} if pods[pod] else {} for pod in sorted(pods)
        }
    if version == 4:
        data = gojson.encode(doc).decode("utf-8")
        if state.legacy_copy == "none":
            doc = {}
        elif state.legacy_copy == "v2":
            doc.pop("podEntries", None)
            doc["checksum"] = spew.checksum_value(
                V2, [policy, default, entries, 0], _renames(V2, LEGACY_TYPE_NAME)
            )
        else:
            doc["checksum"] = 0
        doc["data"] = data
        doc["dataChecksum"] = spew.checksum_string(data)
        return gojson.encode(doc)
    if version == 3:
        go_pods = {pod: [_cpuset_value(cpus)] for pod, cpus in pods.items()}
        t, value = V3, [policy, default, entries, go_pods, 0]
    else:
        t, value = V2, [policy, default, entries, 0]
    doc["checksum"] = spew.checksum_value(t, value, _renames(t, state.type_name))
    return gojson.encode(doc)


def _renames(t: Struct, type_name: str) -> list[tuple[str, str]]:
    own = t.name.split(".", 1)[1]
    if not isinstance(type_name, str) or type_name not in (own, LEGACY_TYPE_NAME):
        raise InvalidInputError(f"type_name must be {LEGACY_TYPE_NAME!r} or {own!r}")
    return [] if type_name == own else [(own, type_name)]


def _mapping(value: object, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where} must be a dict, not {type(value).__name__}")
    return value


def _cpu_ids(cpus: object, where: str) -> frozenset[int]:
    if isinstance(cpus, str) or not isinstance(cpus, set | frozenset | list | tuple):
        raise InvalidInputError(f"{where} must be a set of CPU ids, not {type(cpus).__name__}")
    out = frozenset(cpus)
    for cpu in out:
        if type(cpu) is not int or not 0 <= cpu <= MAX_CPU_ID:
            raise InvalidInputError(f"{where}: CPU id {cpu!r} is not an int from 0 to {MAX_CPU_ID}")
    return out
