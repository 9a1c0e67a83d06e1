"""Bringing one kind of the node's state to a wanted state, writing only what differs.

The wanted items are built before the write lock; one query against ``node_items`` names the
keys that are new, differ or went. Deletes and changes go first (key order), then new items in
the source's order (where a new DRA claim goes in the list). A follower's :class:`FileSync`
skips the parse when the bytes' digest is its last sync's and ``node_files.digest`` (which
every writer of the kind changes) still matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from podstore.checkpoint import CPUManagerState, DRAState, MemoryManagerState, read_node_checkpoint
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.decode import parse
from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_source
from podstore.checkpoint.kinds import FROM_TREE
from podstore.errors import InvalidInputError
from podstore.sqlite.sessions import Sessions
from podstore.storage import ends, events
from podstore.storage.node import cpu, dra, files, memory, numa_and_names
from podstore.storage.node.items import Item, Items, Key, Part, dumps, key_order, key_text
from podstore.storage.sql import node as sql
from podstore.types import NodeSyncReport

#: The kinds this package keeps (the device manager's is storage/sync.py's).
KINDS = ("cpu", "memory", "dra")
_PARTS: dict[str, Part] = {"cpu": cpu.PART, "memory": memory.PART, "dra": dra.PART}
_ALL_PARTS = (*_PARTS.values(), numa_and_names.TOPOLOGY, numa_and_names.NAMES)

NodeState = CPUManagerState | MemoryManagerState | DRAState


@dataclass(frozen=True, slots=True)
class PreparedNode:
    """A kind's wanted state, verified and turned into items before the write lock;
    ``digest``: of the file bytes it was read from (None: not read from a file by kind)."""

    kind: str
    path: str | None
    version: str
    checksum: int
    verified: bool
    items: Mapping[Key, Item]
    form: dict[str, Any]
    digest: str | None = None


def prepared_state(
    kind: str, state: object, path: str | None = None, digest: str | None = None
) -> PreparedNode:
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
    return PreparedNode(kind, path, version, int(state.checksum), verified, items, form, digest)


def file_digest(text: str) -> str:
    """The digest of a file's bytes, from the text ``read_source`` gave for them."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _prepared_text(kind: str, text: str, origin: str, path: str | os.PathLike[str]) -> PreparedNode:
    where = os.path.abspath(os.fspath(path))
    # Thousands of items, none in a cycle: a collector pass would rescan them all.
    with collector_paused():
        return prepared_state(
            kind, FROM_TREE[kind](parse(text, origin), origin), where, file_digest(text)
        )


def prepare(
    path: str | os.PathLike[str], kind: str = "auto", *, max_bytes: int | None = None
) -> PreparedNode:
    """Read and verify a CPU, memory or DRA checkpoint (``auto``: by its content).

    Raises what ``read_node_checkpoint`` raises, and InvalidInputError for a device manager
    checkpoint (``import_checkpoint`` loads those) or values the store cannot hold.
    """
    if kind not in ("auto", *KINDS):
        raise InvalidInputError(f"kind must be auto, cpu, memory or dra, not {kind!r}")
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if kind in KINDS and isinstance(path, str | os.PathLike):
        return _prepared_text(kind, *read_source(path, limit), path)
    found = read_node_checkpoint(path, kind, max_bytes=limit)
    if found.kind not in KINDS:
        raise InvalidInputError(
            f"{os.fspath(path)!s} is a device manager checkpoint; import it as kind devices"
        )
    state_read: Any = found.state
    with collector_paused():
        return prepared_state(found.kind, state_read, os.path.abspath(os.fspath(path)))


def _old_item(payload: str | None, devices: str | None) -> Item:
    """A stored item as its events need it: its payload and devices."""
    return Item(payload, "", None, () if devices is None else tuple(json.loads(devices)))


def _put_row(part: Part, text: str, item: Item) -> tuple[str, str, str, str | None, Any]:
    devices = dumps(item.devices) if item.devices else None
    return (part.name, text, item.canon, item.payload, devices)


def fill_pending(conn: sqlite3.Connection) -> None:
    """After revision 0008's upgrade: ``node_items`` from the stored rows (once)."""
    if conn.execute(sql.PENDING).fetchone() is None:
        return
    conn.execute(sql.ITEMS_CLEAR)
    for part in _ALL_PARTS:
        conn.executemany(
            sql.ITEM_PUT,
            [_put_row(part, key_text(k), item) for k, item in part.stored(conn).items()],
        )
    conn.execute(sql.PENDING_CLEAR)


def items_disagreeing(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(part, item_key) of each item where ``node_items`` and the stored rows disagree (for
    ``podstore verify``; none while the table waits for its first fill)."""
    if conn.execute(sql.PENDING).fetchone() is not None:
        return []
    out = []
    for part in _ALL_PARTS:
        kept = {str(k): tuple(rest) for k, *rest in conn.execute(sql.ITEMS_OF, (part.name,))}
        rows = {key_text(k): _put_row(part, "", item)[2:] for k, item in part.stored(conn).items()}
        out += [
            (part.name, k) for k in sorted(kept.keys() | rows.keys()) if kept.get(k) != rows.get(k)
        ]
    return out


def apply_items(
    conn: sqlite3.Connection, part: Part, wanted: Mapping[Key, Item]
) -> tuple[int, int]:
    """Make ``part``'s items equal ``wanted``; (items written, items deleted), one history
    event each."""
    fill_pending(conn)
    keys = list(wanted)
    texts = [key_text(k) for k in keys]
    for statement in sql.SETUP:
        conn.execute(statement)
    conn.execute(sql.WANTED_CLEAR)  # a failed sync's rows, if its rollback did not take them
    conn.executemany(
        sql.WANTED_LOAD,
        [
            (t, i, item.canon)
            for i, (t, item) in enumerate(zip(texts, wanted.values(), strict=True))
        ],
    )
    found = conn.execute(sql.ITEMS_DIFFER, {"part": part.name}).fetchall()
    conn.execute(sql.WANTED_CLEAR)
    if not found:
        return 0, 0
    gone: list[tuple[Key, Item]] = []
    changed: list[tuple[Key, Item]] = []
    added: list[int] = []
    for text, had, payload, devices, ord_ in found:
        if had == 0:
            added.append(int(ord_))
        elif had == 1:
            changed.append((keys[int(ord_)], _old_item(payload, devices)))
        else:
            found_key: Any = tuple(json.loads(text))
            gone.append((found_key, _old_item(payload, devices)))
    gone.sort(key=lambda g: key_order(g[0]))
    changed.sort(key=lambda c: key_order(c[0]))
    added.sort()
    pending = events.Pending()
    puts = []
    for key, old in gone:
        part.remove(conn, key, old)
        pending.node(f"{part.family}-delete", key, old.payload, old.devices)
    conn.executemany(sql.ITEM_DELETE, [(part.name, key_text(k)) for k, _old in gone])
    for key, old in changed:
        item = wanted[key]
        part.write(conn, key, item, old)
        released = sorted(set(old.devices) - set(item.devices))
        pending.node(f"{part.family}-set", key, item.payload, item.devices, released)
        puts.append(_put_row(part, key_text(key), item))
    for i in added:
        key = keys[i]
        item = wanted[key]
        part.write(conn, key, item, None)
        pending.node(f"{part.family}-set", key, item.payload, item.devices)
        puts.append(_put_row(part, texts[i], item))
    conn.executemany(sql.ITEM_PUT, puts)
    stamp = pending.write(conn)
    evidence = _end_evidence(part, [key for key, _old in gone], stamp[1])
    if evidence:
        ends.record(conn, evidence, stamp)
    return len(changed) + len(added), len(gone)


def _end_evidence(part: Part, gone: list[Key], at: str) -> list[ends.Evidence]:
    """What the items that went say of holders: a container left the CPU or memory manager's
    file, or a pod's log directory went."""
    if part.family in ("cpu", "memory"):
        return [
            ends.Evidence(pod, container, part.family, at)
            for pod, container, resource in gone
            if pod is not None and container is not None and resource == part.family
        ]
    if part is numa_and_names.NAMES:
        return [
            ends.Evidence(pod, None, "pod-logs", at)
            for pod, _c, resource in gone
            if pod is not None and resource == numa_and_names.NAME
        ]
    return []


def apply(conn: sqlite3.Connection, prepared: PreparedNode) -> NodeSyncReport:
    """Bring the store's ``prepared.kind`` to ``prepared`` inside the caller's transaction."""
    kind = prepared.kind
    # The file row first: the policy item writes into it.
    form_changed = files.put(conn, kind, prepared.version, prepared.form, prepared.digest)
    written, deleted = apply_items(conn, _PARTS[kind], prepared.items)
    return NodeSyncReport(
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


@dataclass
class FileSync:
    """What a follower's syncs of one kind's file keep: the digest of the bytes its last
    sync read, and that sync's report."""

    kind: str
    path: str
    last: tuple[str, NodeSyncReport] | None = None


def sync_file(
    sessions: Sessions, state: FileSync, *, max_bytes: int | None = None
) -> NodeSyncReport:
    """Bring the store's ``state.kind`` to its file, in one transaction of its own; nothing is
    parsed or written when the bytes are those of the last sync and the store still holds
    the kind as that sync left it."""
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    text, origin = read_source(state.path, limit)
    digest = file_digest(text)
    if state.last is not None and state.last[0] == digest:
        with sessions.snapshot() as conn:
            same = files.digest(conn, state.kind) == digest
        if same:
            return replace(state.last[1], written=0, deleted=0, form_changed=False)
    prepared = _prepared_text(state.kind, text, origin, state.path)
    del text
    with sessions.write() as conn:
        report = apply(conn, prepared)
    state.last = (digest, report)
    return report


def read_state(conn: sqlite3.Connection, kind: str) -> NodeState | None:
    """The state of ``kind`` the store holds (None: no checkpoint of it was loaded)."""
    if kind == "cpu":
        return cpu.read_state(conn)
    if kind == "memory":
        return memory.read_state(conn)
    if kind == "dra":
        return dra.read_state(conn)
    raise InvalidInputError(f"kind must be cpu, memory or dra, not {kind!r}")


def apply_topology_or_names(
    conn: sqlite3.Connection, kind: str, part: Part, wanted: Items, path: str | None
) -> NodeSyncReport:
    """Bring the topology or the names to ``wanted`` (``kind`` says which, for the report)."""
    written, deleted = apply_items(conn, part, wanted)
    return NodeSyncReport(kind, path, None, None, True, len(wanted), written, deleted)


#: A stored item as the fleet's snapshot takes it: (family, pod_uid, container, resource,
#: payload JSON as its latest event carries it).
ItemRow = tuple[str, str | None, str | None, str, str | None]


def current_items(conn: sqlite3.Connection) -> list[ItemRow]:
    """Every node item the store holds, in key order, with the payload its latest event
    carries: what a fleet snapshot replaces the central items with."""
    out: list[ItemRow] = []
    for part in _ALL_PARTS:
        items = part.stored(conn)
        for key in sorted(items, key=key_order):
            out.append((part.family, *key, items[key].payload))
    return out
