"""Checking the history's hash chain (docs/sql.md, "The hash chain"), and re-chaining it under
a new identity.

One edit is reported once: after a break the walk goes on from the stored hash. A replaced hash
is told from edited content by the successor, which chains from the recomputed hash in the
first case and the stored one in the second.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from podstore.errors import StoreCorruptError
from podstore.pure import chain
from podstore.storage.sql import events as sql
from podstore.types import ChainBreak, HistoryReport

#: Breaks a report lists (``break_count`` counts all of them).
MAX_BREAKS = 10

#: Events read per statement.
CHUNK = 5000


def _events(conn: sqlite3.Connection) -> Iterator[tuple[Any, ...]]:
    """Every kept event (``sql.CHAIN_ROWS`` columns), in seq order, a chunk at a time."""
    after = 0
    while True:
        rows = conn.execute(sql.CHAIN_ROWS, (after, CHUNK)).fetchall()
        if not rows:
            return
        yield from rows
        after = int(rows[-1][0])


@dataclass(slots=True)
class _Suspect:
    """An event whose hash did not recompute, until its successor says how."""

    seq: int
    recomputed: bytes
    stored: bytes
    base: str  # what it chained from: "genesis", "event" or "link"


@dataclass(slots=True)
class _Walk:
    breaks: list[ChainBreak] = field(default_factory=list)
    count: int = 0

    def add(self, seq: int, kind: str, message: str) -> None:
        self.count += 1
        if len(self.breaks) < MAX_BREAKS:
            self.breaks.append(ChainBreak(seq, kind, f"seq {seq} ({kind}): {message}"))

    def settle(self, s: _Suspect, store_id: str, *, hash_edited: bool | None) -> None:
        """Report a suspect: its own hash replaced (True), its content or what it chains from
        changed (False), or either (None: no successor to tell)."""
        either = "" if hash_edited is False else ", or its own hash"
        if hash_edited:
            kind = "hash-edited"
            what = "its stored hash was changed (its content still gives the hash the next "
            what += "event chains from)"
        elif s.base == "genesis":
            kind = "genesis"
            what = f"does not chain from the genesis of store_id {store_id}: the store_id or "
            what += f"the event was changed{either}"
        elif s.base == "link":
            kind = "link-wrong"
            what = "does not chain from the link recorded for it: the link or the event was "
            what += f"changed{either}"
        else:
            kind = "edited"
            what = f"its hash does not follow from its content and the hash of seq {s.seq - 1}: "
            what += f"the event was edited (or seq {s.seq - 1} was, and re-hashed){either}"
        self.add(s.seq, kind, what)


def verify(conn: sqlite3.Connection) -> HistoryReport:
    """The chain checked over every kept event, inside the caller's read transaction."""
    store_id_row = conn.execute(sql.STORE_ID).fetchone()
    store_id = "" if store_id_row is None else str(store_id_row[0])
    genesis = chain.genesis(store_id) if store_id_row is not None else b""
    walk = _Walk()
    if store_id_row is None:
        walk.add(1, "genesis", "the store has no store_id, so the chain has no genesis")
    links = conn.cursor().execute(sql.CHAIN_LINKS)
    link_row = links.fetchone()
    high_water = int(conn.execute(sql.HIGH_WATER).fetchone()[0])
    last_seq = 0
    last_hash = genesis
    suspect: _Suspect | None = None
    events = 0
    for row in _events(conn):
        seq = int(row[0])
        fields = row[1:8]  # what the hash covers besides the seq
        stored = bytes(row[8])
        events += 1
        # Links below this event belong to no kept event.
        while link_row is not None and int(link_row[0]) < seq:
            walk.add(int(link_row[0]), "link-forged", "a link for an event that is not kept")
            link_row = links.fetchone()
        link: bytes | None = None
        if link_row is not None and int(link_row[0]) == seq:
            link = bytes(link_row[1])
            link_row = links.fetchone()
        contiguous = seq == last_seq + 1
        if seq == 1:
            base, base_kind = genesis, "genesis"
        elif contiguous:
            base, base_kind = last_hash, "event"
        elif link is not None:
            base, base_kind = link, "link"
        else:
            walk.add(
                seq,
                "removed",
                f"events {last_seq + 1}..{seq - 1} are missing and no link records the hash "
                "before them (removed from outside podstore)",
            )
            base, base_kind = b"", "removed"
        if link is not None and (seq == 1 or contiguous):
            walk.add(
                seq,
                "link-forged",
                "a link although the event chains from "
                + ("the genesis" if seq == 1 else f"seq {seq - 1}, which is kept"),
            )
        computed = chain.link(base, seq, *fields) if base_kind != "removed" else stored
        if suspect is not None:
            if contiguous and suspect.seq == seq - 1:
                from_recomputed = chain.link(suspect.recomputed, seq, *fields)
                if computed != stored and from_recomputed == stored:
                    walk.settle(suspect, store_id, hash_edited=True)
                    computed = stored
                else:
                    walk.settle(suspect, store_id, hash_edited=False)
            else:
                walk.settle(suspect, store_id, hash_edited=None)
            suspect = None
        if computed != stored:
            suspect = _Suspect(seq, computed, stored, base_kind)
        last_seq, last_hash = seq, stored
    if suspect is not None:
        walk.settle(suspect, store_id, hash_edited=None)
    head_hash = last_hash if last_seq == high_water else b""
    while link_row is not None:
        seq = int(link_row[0])
        if seq == high_water + 1 and last_seq < high_water:
            head_hash = bytes(link_row[1])
        else:
            walk.add(seq, "link-forged", "a link beyond the newest event")
        link_row = links.fetchone()
    if high_water > last_seq and not head_hash:
        walk.add(
            high_water,
            "head",
            "the newest seq handed out is not kept and no link records the hash after it",
        )
    (link_count,) = conn.execute(sql.LINK_COUNT).fetchone()
    return HistoryReport(
        store_id=store_id,
        events=events,
        links=int(link_count),
        head_seq=high_water,
        head_hash=head_hash,
        breaks=tuple(sorted(walk.breaks, key=lambda b: b.seq)),
        break_count=walk.count,
    )


def rechain(conn: sqlite3.Connection, store_id: str) -> int:
    """Rewrite every kept hash and link as if written under ``store_id``; returns the events
    re-chained. Raises StoreCorruptError for a chain that does not verify (it would hide it)."""
    report = verify(conn)
    if not report.ok:
        first = report.breaks[0]
        raise StoreCorruptError(
            f"the history chain is broken ({first.message}); re-chaining it would hide "
            "that: `podstore verify` lists the breaks"
        )
    (trigger,) = conn.execute(sql.APPEND_ONLY_TRIGGER).fetchone() or (None,)
    if trigger is not None:
        conn.execute(sql.DROP_APPEND_ONLY_TRIGGER)
    prev = chain.genesis(store_id)
    last = count = 0
    link_updates: list[tuple[bytes, int]] = []
    hashes: list[tuple[bytes, int]] = []
    for row in _events(conn):
        seq = int(row[0])
        if seq != last + 1:
            link_updates.append((prev, seq))
        prev = chain.link(prev, seq, *row[1:8])
        hashes.append((prev, seq))
        last = seq
        if len(hashes) == CHUNK:  # memory stays flat however long the history
            conn.executemany(sql.SET_HASH, hashes)
            count += len(hashes)
            hashes.clear()
    conn.executemany(sql.SET_HASH, hashes)
    if report.head_seq > last:
        link_updates.append((prev, report.head_seq + 1))
    conn.executemany(sql.SET_LINK, link_updates)
    if trigger is not None:
        conn.execute(str(trigger))
    return count + len(hashes)
