"""Bringing one kind of the node's state to a wanted state, writing only what differs.

The wanted items are computed before the write lock (:func:`prepare` reads and verifies a
file; :func:`prepared_state` takes a state given in Python). Inside the caller's transaction
:func:`apply` reads the stored items (:func:`apply_held` starts from those the last sync left
when the store provably still holds them, ``held.py``), and for each key writes the rows and
one history event where the item is new or its ``canon`` differs (``<family>-set``, the new
payload) and removes the rows with one event where it went (``<family>-delete``, the last
payload); an item whose canon is the same is left as stored, rows and order alike. Events go
out deletes and changes first (in key order), then new items in the source's order (where a
new DRA claim goes in the list). ``node_files`` takes the file's format and form without an
event.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, ne
from typing import Any

from podstore.checkpoint import (
    CPUManagerState,
    DRAState,
    MemoryManagerState,
    read_node_checkpoint,
)
from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_source
from podstore.errors import InvalidInputError
from podstore.storage import events
from podstore.storage.node import cpu, dra, facts, files, held, incremental, memory
from podstore.storage.node.delta import Delta
from podstore.storage.node.incremental import NodeReadState
from podstore.storage.node.items import Item, Items, Key, Part, key_order
from podstore.types import NodeSyncReport

#: The kinds this package keeps (the device manager's is storage/sync.py's).
KINDS = ("cpu", "memory", "dra")
_PARTS: dict[str, Part] = {"cpu": cpu.PART, "memory": memory.PART, "dra": dra.PART}

NodeState = CPUManagerState | MemoryManagerState | DRAState


@dataclass(frozen=True, slots=True)
class PreparedNode:
    """A kind's wanted state, verified and turned into items before the write lock."""

    kind: str
    path: str | None
    version: str
    checksum: int
    verified: bool
    items: Mapping[Key, Item]
    form: dict[str, Any]
    #: A fast read's keys that can differ from the read before it (None: a full read). Not
    #: part of what was read: two reads of one file compare equal with or without it.
    delta: Delta | None = field(default=None, compare=False)


def prepared_state(kind: str, state: NodeState, path: str | None = None) -> PreparedNode:
    """The items of a state (read from a file, or given). Raises InvalidInputError for a
    state of another kind, or values the store cannot hold."""
    if kind == "cpu" and isinstance(state, CPUManagerState):
        items, version, form = cpu.wanted(state)
        verified = state.verified
    elif kind == "memory" and isinstance(state, MemoryManagerState):
        items, version, form = memory.wanted(state)
        verified = state.verified
    elif kind == "dra" and isinstance(state, DRAState):
        items, version, form = dra.wanted(state)
        verified = True
    else:
        raise InvalidInputError(f"state: expected the {kind} manager's state, got {state!r:.80}")
    return PreparedNode(kind, path, version, int(state.checksum), verified, items, form)


def prepare(
    path: str | os.PathLike[str],
    kind: str = "auto",
    *,
    max_bytes: int | None = None,
    state: NodeReadState | None = None,
) -> PreparedNode:
    """Read and verify a CPU, memory or DRA checkpoint (``auto``: by its content).

    With ``state`` (the same object for every read of one kind's file) and an explicit
    ``kind``, what the last read decoded is reused (:mod:`.incremental`; same result, same
    errors). Raises what ``read_node_checkpoint`` raises, and InvalidInputError for a device
    manager checkpoint (``import_checkpoint`` loads those) or values the store cannot hold.
    """
    if kind not in ("auto", *KINDS):
        raise InvalidInputError(f"kind must be auto, cpu, memory or dra, not {kind!r}")
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if state is not None and kind in KINDS:
        with state.lock:
            text, origin = read_source(path, limit)
            where = os.path.abspath(os.fspath(path))
            fast = incremental.read(kind, text, state)
            if fast is not None:
                return PreparedNode(kind, where, *fast)
            return prepared_state(kind, incremental.FULL[kind](text, origin), where)
    found = read_node_checkpoint(path, kind, max_bytes=limit)
    if found.kind not in KINDS:
        raise InvalidInputError(
            f"{os.fspath(path)!s} is a device manager checkpoint; import it as kind devices"
        )
    state_read: Any = found.state
    return prepared_state(found.kind, state_read, os.path.abspath(os.fspath(path)))


class _Absent:
    """What ``have`` gives for a key it lacks: a canon no item has."""

    __slots__ = ()
    canon = object()


_ABSENT: Any = _Absent()
_CANON = attrgetter("canon")


def apply_items(
    conn: sqlite3.Connection,
    part: Part,
    wanted: Mapping[Key, Item],
    have: Items | None = None,
    delta: Delta | None = None,
) -> tuple[int, int]:
    """Make ``part``'s items equal ``wanted``; (items written, items deleted), one history
    event each. ``have``: the items the store holds (read back when None), updated in place to
    those it holds after (an unchanged item keeps its stored value, a written one is
    ``wanted``'s). ``delta``: what a read knows of ``wanted`` against the read whose items
    ``have`` holds — only its keys can differ, and it has their items — so no other key is
    looked at; when counting says otherwise, every key is compared."""
    if have is None:
        have = part.stored(conn)
    source: Mapping[Key, Item] = wanted
    if delta is not None and delta.keys is not None:
        source = new = delta.items
        differ = [
            (key, old)
            for key in delta.keys
            if key in new and (old := have.get(key, _ABSENT)).canon != new[key].canon
        ]
        gone = sorted((k for k in delta.keys if k in have and k not in new), key=key_order)
        added = [key for key, old in differ if old is _ABSENT]
        if len(have) - len(gone) + len(added) != len(wanted):
            # Not the items the delta is against: compare them all.
            return apply_items(conn, part, wanted, have)
    else:
        # The keys whose canon differs (or is absent), compared in C: a sync of thousands
        # of items that changed one would spend more on a Python loop over them than on the
        # write.
        olds = list(map(have.get, wanted, repeat(_ABSENT)))
        unequal = map(ne, map(_CANON, olds), map(_CANON, wanted.values()))
        differ = list(compress(zip(wanted, olds, strict=True), unequal))
        added = [key for key, old in differ if old is _ABSENT]
        # Every stored key is wanted when as many are as are stored: no scan for the gone.
        if len(have) > len(wanted) - len(added):
            gone = sorted((k for k in have if k not in wanted), key=key_order)
        else:
            gone = []
    changed = [key for key, old in differ if old is not _ABSENT]
    if not (gone or changed or added):
        return 0, 0
    changed.sort(key=key_order)
    pending = events.Pending()
    for key in gone:
        old = have.pop(key)
        part.remove(conn, key, old)
        pending.node(f"{part.family}-delete", key, old.payload, old.devices)
    for key in changed:
        old, item = have[key], source[key]
        part.write(conn, key, item, old)
        released = sorted(set(old.devices) - set(item.devices))
        pending.node(f"{part.family}-set", key, item.payload, item.devices, released)
        have[key] = item
    for key in added:
        item = source[key]
        part.write(conn, key, item, None)
        pending.node(f"{part.family}-set", key, item.payload, item.devices)
        have[key] = item
    pending.write(conn)
    return len(changed) + len(added), len(gone)


def apply(conn: sqlite3.Connection, prepared: PreparedNode) -> NodeSyncReport:
    """Bring the store's ``prepared.kind`` to ``prepared`` inside the caller's transaction."""
    return apply_held(conn, prepared, None)[0]


def apply_held(
    conn: sqlite3.Connection, prepared: PreparedNode, last: held.Held | None
) -> tuple[NodeSyncReport, held.Held | None]:
    """:func:`apply`, starting from ``last`` — the items a sync of this kind left — when the
    store still holds them (``held.still_held``), else from the items read back; also returns
    what the store holds of the kind after it, to hold once the transaction has committed."""
    kind = prepared.kind
    part = _PARTS[kind]
    # The file row first: the policy item writes into it.
    form_changed = files.put(conn, kind, prepared.version, prepared.form)
    have = held.still_held(conn, part, last)
    delta = prepared.delta
    known = None
    if have is None:
        have = part.stored(conn)
    elif last is not None and delta is not None and delta.base == last.generation:
        known = delta  # ``have`` holds the items of the read the delta is against
    written, deleted = apply_items(conn, part, prepared.items, have, known)
    at = held.mark(conn)
    report = NodeSyncReport(
        kind=kind,
        path=prepared.path,
        version=prepared.version,
        checksum=prepared.checksum,
        verified=prepared.verified,
        items=len(prepared.items),
        written=written,
        deleted=deleted,
        form_changed=form_changed,
    )
    generation = None if delta is None else delta.generation
    return report, None if at is None else held.Held(have, at, generation)


def read_state(conn: sqlite3.Connection, kind: str) -> NodeState | None:
    """The state of ``kind`` the store holds (None: no checkpoint of it was loaded)."""
    if kind == "cpu":
        return cpu.read_state(conn)
    if kind == "memory":
        return memory.read_state(conn)
    if kind == "dra":
        return dra.read_state(conn)
    raise InvalidInputError(f"kind must be cpu, memory or dra, not {kind!r}")


def apply_facts(
    conn: sqlite3.Connection, kind: str, part: Part, wanted: Items, path: str | None
) -> NodeSyncReport:
    """Bring the topology or the names to ``wanted`` (``kind`` says which, for the report)."""
    written, deleted = apply_items(conn, part, wanted)
    return NodeSyncReport(kind, path, None, None, True, len(wanted), written, deleted)


#: A stored item as the fleet's snapshot takes it: (family, pod_uid, container, resource,
#: payload JSON as its latest event carries it).
ItemRow = tuple[str, str | None, str | None, str, str | None]


def current_items(conn: sqlite3.Connection) -> list[ItemRow]:
    """Every item the store holds for its CPU, memory and DRA managers, topology and pod
    names, in key order: what a fleet snapshot replaces the central items with (the payload
    is the one the item's latest event carries, so the fleet holds what replaying the history
    would give)."""
    out: list[ItemRow] = []
    for part in (*_PARTS.values(), facts.TOPOLOGY, facts.NAMES):
        items = part.stored(conn)
        for key in sorted(items, key=key_order):
            out.append((part.family, *key, items[key].payload))
    return out
