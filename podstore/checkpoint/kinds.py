"""The four checkpoint files of a node, told apart by their content: the top-level keys as Go
matches them, and the types of their values (docs/node-files.md, "Telling the kinds apart").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podstore.checkpoint import decode, gojson
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.cpu_state import CPUManagerState, cpu_state_from_tree
from podstore.checkpoint.decode import Checkpoint, parse
from podstore.checkpoint.dra_state import dra_state_from_tree
from podstore.checkpoint.dra_types import DRAState
from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_source
from podstore.checkpoint.memory_state import MemoryManagerState, memory_state_from_tree
from podstore.errors import CheckpointError, CheckpointFormatError, InvalidInputError

#: The kinds, in the order ``auto`` considers them.
KINDS = ("devices", "cpu", "memory", "dra")
#: Where kubelet keeps each kind, relative to its root directory.
FILE_NAMES = {
    "devices": "device-plugins/kubelet_internal_checkpoint",
    "cpu": "cpu_manager_state",
    "memory": "memory_manager_state",
    "dra": "dra_manager_state",
}

NodeState = Checkpoint | CPUManagerState | MemoryManagerState | DRAState


@dataclass(frozen=True)
class NodeCheckpoint:
    """A verified checkpoint of any kind: ``kind`` and the reader's result (``state``)."""

    kind: str
    state: NodeState

    @property
    def version(self) -> str:
        """The format the file was written in: ``v1``…``v4``, or ``data`` for DRA."""
        state = self.state
        if isinstance(state, DRAState):
            return state.version
        return f"v{state.version}"

    @property
    def entries(self) -> int:
        """Devices: entries; CPU and memory: container assignments (v1 CPU: containers by
        id); DRA: claims."""
        state = self.state
        if isinstance(state, Checkpoint):
            return len(state.entries)
        if isinstance(state, CPUManagerState):
            return sum(len(c) for c in state.entries.values()) + len(state.legacy_entries)
        if isinstance(state, MemoryManagerState):
            return sum(len(c or ()) for c in (state.entries or {}).values())
        return len(state.claims or ())

    @property
    def checksum(self) -> int:
        """The stored checksum (``dataChecksum`` for the CPU v4 and memory v3 formats)."""
        return self.state.checksum

    @property
    def verified(self) -> bool:
        """False when a stored checksum of 0 was accepted unverified (CPU v1/v2, memory v1)."""
        return getattr(self.state, "verified", True)


# A device checkpoint as kubelet writes it starts so; the only kind with an object under Data.
_DEVICES_PREFIX = re.compile(r'\s*\{\s*"Data"\s*:\s*\{')


def _keys(tree: Any) -> dict[str, Any]:
    """Top-level keys by their folded name, each with the last value given for it."""
    out: dict[str, Any] = {}
    if type(tree) is tuple:
        for key, value in tree:
            folded = gojson.fold_name(key)
            if folded is not None:
                out[folded] = value
    return out


def _data_keys(value: Any) -> dict[str, Any]:
    if type(value) is not str:
        return {}
    try:
        return _keys(gojson.parse(value))
    except gojson.JSONSyntaxError:
        return {}


def candidates(tree: Any) -> list[str]:
    """The kinds a parsed document may be, most likely first (empty: none)."""
    keys = _keys(tree)
    data = keys.get("DATA")
    out: list[str] = []
    if type(data) is tuple:
        out.append("devices")
    inner = _data_keys(data) if "DATACHECKSUM" in keys or "POLICYNAME" in keys else {}
    if "DEFAULTCPUSET" in keys or "DEFAULTCPUSET" in inner:
        out.append("cpu")
    if "MACHINESTATE" in keys or "MACHINESTATE" in inner:
        out.append("memory")
    if not out and ("POLICYNAME" in keys or "DATACHECKSUM" in keys):
        out += ["cpu", "memory"]
    if not out and (
        (type(data) is str and "CHECKSUM" in keys) or "VERSION" in keys or "ENTRIES" in keys
    ):
        out.append("dra")
    return out


def detect_kind(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> str:
    """The kind of checkpoint a file (path or bytes) holds, by its content only.

    Raises :class:`CheckpointFormatError` when it fits no kind, and the reading errors of
    :func:`podstore.checkpoint.read_checkpoint`.
    """
    text, origin = read_source(source, max_bytes)
    if _DEVICES_PREFIX.match(text):
        return "devices"
    found = candidates(parse(text, origin))
    if not found:
        raise _no_kind(origin)
    return found[0]


def _no_kind(origin: str) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"{origin}not a kubelet checkpoint of any known kind ({', '.join(KINDS)}): "
        "its top-level keys fit none"
    )


FROM_TREE: dict[str, Callable[[Any, str], NodeState]] = {
    "cpu": cpu_state_from_tree,
    "memory": memory_state_from_tree,
    "dra": dra_state_from_tree,
}


@collector_paused()
def read_node_checkpoint(
    source: str | os.PathLike[str] | bytes,
    kind: str = "auto",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> NodeCheckpoint:
    """Read and verify a checkpoint of ``kind`` (``auto``: by its content, the first kind
    that verifies).

    Raises :class:`InvalidInputError` for an unknown ``kind``, :class:`CheckpointFormatError`
    when ``auto`` finds no kind, and the errors of the kind's reader.
    """
    if kind != "auto" and kind not in KINDS:
        raise InvalidInputError(f"kind must be auto or one of {', '.join(KINDS)}, not {kind!r}")
    holder = [read_source(source, max_bytes)]
    text, origin = holder[0]
    if kind == "devices" or (kind == "auto" and _DEVICES_PREFIX.match(text)):
        del text
        # The device reader drops the text as soon as it is parsed; nothing here may keep it.
        return NodeCheckpoint("devices", decode.load(*holder.pop()))
    del holder
    tree = parse(text, origin)
    found = candidates(tree) if kind == "auto" else [kind]
    if not found:
        raise _no_kind(origin)
    if found[0] == "devices":
        # Data holds an object, but not at the start kubelet writes: rare, so parse again.
        del tree
        return NodeCheckpoint("devices", decode.load(text, origin))
    del text
    first_error: CheckpointError | None = None
    for candidate in found:
        try:
            return NodeCheckpoint(candidate, FROM_TREE[candidate](tree, origin))
        except CheckpointError as e:
            first_error = first_error or e
    assert first_error is not None
    raise first_error
