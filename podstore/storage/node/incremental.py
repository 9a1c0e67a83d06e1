"""Reading a CPU, memory or DRA file again and again as kubelet rewrites it: the members of
the last file read (pod entries, claims, NUMA nodes), by their exact JSON text, are not
decoded, verified or turned into items twice (:mod:`.members`).

:func:`read` takes the formats kubelet writes today — CPU v4, memory v3 and DRA's data
format — when the file is laid out exactly as kubelet writes it, and returns exactly what the
full path (``read_node_checkpoint`` + ``prepared_state``) returns for the same text; any file
it cannot take in full (another layout or version, a syntax or type error, a checksum
mismatch, a value the store refuses, anything doubtful) gives ``None``, and the caller reads
the same text with the full decoder (:func:`full`), which says what is wrong. Checksums are
always computed over the whole ``data`` / ``Data`` string, as the format's rule says.

CPU v4 and memory v3 carry an older version's copy of the state beside ``data``; kubelet
decodes it (a type error there fails the read) and ignores it. The copy is checked by text:
its members must be, character for character, the leading members of ``data``, which the
same Go types decode (so they decode there too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint import spew
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.cpu_state import parse_cpu_state
from podstore.checkpoint.dra_state import parse_dra_state
from podstore.checkpoint.godecode import DecodeError, decode_value
from podstore.checkpoint.gojson import fix_string
from podstore.checkpoint.gotypes import CHECKSUM, STRING, GoType
from podstore.checkpoint.memory_state import parse_memory_state
from podstore.storage.node.items import Items
from podstore.storage.node.members import MemberCache, Refused, expect, scan_string, scan_value

#: What a fast read gives: version, checksum, verified, items, form (as ``PreparedNode``).
Fast = tuple[str, int, bool, Items, dict[str, Any]]

#: The full decoders of text already read (what ``read_node_checkpoint`` runs for a kind).
FULL: dict[str, Callable[[str, str], Any]] = {
    "cpu": parse_cpu_state,
    "memory": parse_memory_state,
    "dra": parse_dra_state,
}


@dataclass
class NodeReadState:
    """What repeated reads of one kind's file keep: the converted members of the last file
    read, per table (``entries``, ``podEntries``, …), and the lock a read holds."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    tables: dict[str, MemberCache] = field(default_factory=dict)
    #: reads the fast path took in full, and reads it gave to the full decoder
    fast: int = 0
    full: int = 0

    def table(self, name: str) -> MemberCache:
        cache = self.tables.get(name)
        if cache is None:
            cache = self.tables[name] = MemberCache()
        return cache


def read(kind: str, text: str, state: NodeReadState) -> Fast | None:
    """The prepared parts of ``text`` (a ``kind`` file) from the fast path, or None: the full
    decoder must read it. Refills ``state`` with this file's members when it succeeds."""
    from podstore.storage.node import incremental_cpu, incremental_dra, incremental_memory

    readers: dict[str, Callable[[str, NodeReadState], Fast]] = {
        "cpu": incremental_cpu.read,
        "memory": incremental_memory.read,
        "dra": incremental_dra.read,
    }
    try:
        with collector_paused():
            out = readers[kind](text, state)
    except Refused:
        for cache in state.tables.values():
            cache.discard()
        state.full += 1
        return None
    for cache in state.tables.values():
        cache.commit()
    state.fast += 1
    return out


def go_value(t: GoType, initial: Any, value: Any) -> Any:
    """``value`` (parsed) decoded into ``initial`` of Go type ``t``; refused on an error."""
    try:
        return decode_value(t, initial, value)
    except DecodeError:
        raise Refused from None


def go_string(value: Any) -> str:
    """A parsed value decoded into a Go string field holding ``""``."""
    out: str = go_value(STRING, "", value)
    return out


@dataclass(frozen=True, slots=True)
class DataFile:
    """The parts of a CPU v4 / memory v3 file outside its older copy: ``data`` as Go decodes
    it, the stored ``dataChecksum``, and where the copy ends (``copy_end``)."""

    data: str
    stored: int
    copy_end: int


_TAIL = ',"checksum":'


def data_file(text: str) -> DataFile:
    """Split a CPU v4 / memory v3 file as kubelet writes it: ``{<copy>,"checksum":N,"data":
    "…","dataChecksum":N}``. The copy itself is checked later (:func:`check_copy`)."""
    expect(text, 0, '{"policyName":')
    # Within a JSON string every quote is escaped, so ',"' cannot be in data: the last
    # ',"checksum":' is the top-level one, or the layout is another and the scan says so.
    end = text.rfind(_TAIL)
    if end < 0:
        raise Refused
    value, pos = scan_value(text, end + len(_TAIL))
    go_value(CHECKSUM, 0, value)
    raw, pos = scan_string(text, expect(text, pos, ',"data":'))
    data = raw if raw.isascii() else fix_string(raw)
    value, pos = scan_value(text, expect(text, pos, ',"dataChecksum":'))
    stored: int = go_value(CHECKSUM, 0, value)
    if expect(text, pos, "}") != len(text) or not data:
        raise Refused
    if spew.checksum_string(data) != stored:
        raise Refused  # the full decoder raises the mismatch
    return DataFile(data, stored, end)


def check_copy(text: str, found: DataFile, bounds: list[int]) -> None:
    """The older copy (``text[:copy_end]``) must be ``data``'s leading members, character for
    character: ``bounds`` are where ``data``'s top-level members end. The copy's struct gives
    those keys the same Go types as ``data``'s (or ignores them), so what decoded in
    ``data`` decodes there."""
    end = found.copy_end
    if end not in bounds or not found.data.startswith(text[:end]):
        raise Refused
