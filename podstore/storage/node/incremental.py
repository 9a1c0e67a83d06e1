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

The older copy of the state beside ``data`` in CPU v4 and memory v3 is checked by
:mod:`.datafile`; each kind's layout is read by its own module (``incremental_cpu``,
``incremental_memory``, ``incremental_dra``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.cpu_state import parse_cpu_state
from podstore.checkpoint.dra_state import parse_dra_state
from podstore.checkpoint.memory_state import parse_memory_state
from podstore.storage.node import incremental_cpu, incremental_dra, incremental_memory
from podstore.storage.node.delta import Delta, ItemsOf, new_delta
from podstore.storage.node.items import Item, Key
from podstore.storage.node.members import Fast, Last, MemberCache, Refused, Tables

#: The full decoders of text already read (what ``read_node_checkpoint`` runs for a kind).
FULL: dict[str, Callable[[str, str], Any]] = {
    "cpu": parse_cpu_state,
    "memory": parse_memory_state,
    "dra": parse_dra_state,
}


_READERS: dict[str, Callable[[str, Tables, Last], Fast]] = {
    "cpu": incremental_cpu.read,
    "memory": incremental_memory.read,
    "dra": incremental_dra.read,
}
_ITEMS_OF: dict[str, dict[str, ItemsOf]] = {
    "cpu": incremental_cpu.ITEMS_OF,
    "memory": incremental_memory.ITEMS_OF,
    "dra": incremental_dra.ITEMS_OF,
}

#: A fast read's result: version, checksum, verified, items, form, delta (as ``PreparedNode``
#: holds them).
Read = tuple[str, int, bool, Mapping[Key, Item], dict[str, Any], Delta]


@dataclass
class NodeReadState:
    """What repeated reads of one kind's file keep: the converted members of the last file
    read, per table (``entries``, ``podEntries``, …), and the lock a read holds."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    tables: dict[str, MemberCache] = field(default_factory=dict)
    #: the last fast read's generation, when its keys each came from one member (.delta),
    #: and what its kind's reader keeps of it
    last: Last = field(default_factory=Last)
    #: reads the fast path took in full, and reads it gave to the full decoder
    fast: int = 0
    full: int = 0

    def table(self, name: str) -> MemberCache:
        cache = self.tables.get(name)
        if cache is None:
            cache = self.tables[name] = MemberCache()
        return cache


def read(kind: str, text: str, state: NodeReadState) -> Read | None:
    """The prepared parts of ``text`` (a ``kind`` file) from the fast path, or None: the full
    decoder must read it. Refills ``state`` with this file's members when it succeeds; the
    delta says which keys can differ from the last fast read's items."""
    try:
        with collector_paused():
            out = _READERS[kind](text, state.table, state.last)
    except Refused:
        for cache in state.tables.values():
            cache.discard()
        state.full += 1
        return None
    last = state.last
    delta = new_delta(last.generation, state.tables, _ITEMS_OF[kind], out.fixed, out.unique)
    last.generation = delta.generation if out.unique else None
    for cache in state.tables.values():
        cache.commit()
    state.fast += 1
    return out.version, out.checksum, out.verified, out.items, out.form, delta
