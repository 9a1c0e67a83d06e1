"""What a kind's last sync left in the store, kept in memory so the next sync need not read
it back.

A sync diffs the wanted items against the stored ones (``sync.apply_items``), and reading the
stored ones back (``Part.stored``: every row, every item serialised again) costs more than the
whole diff of a one-container change. So a :class:`~podstore.store.PodStore` keeps, per kind,
the items its last committed sync ended with, under a :class:`Mark` of the store read in that
sync's write transaction, after its writes: the schema cookie, and the seq and hash of the
newest kept event. The next sync uses them instead of reading back only when, inside its own
write transaction, :func:`still_held` finds that nothing can have changed the kind since:

1. **Only events change a kind's items.** Its rows (``node_files.policy_name`` and the kind's
   tables) are written only by ``sync.apply_items``, which writes one ``<family>-set`` or
   ``<family>-delete`` event per item it writes or removes, in the same transaction: a change
   committed has its event, a change rolled back has none. ``files.put`` writes the form and
   format without an event, but no item reads them (the policy item is written by the
   ``apply_items`` that follows it, with its event). Every other podstore writer —
   ``set_*_state``, ``import_node``, another PodStore or process (``AsyncPodStore``'s worker,
   the CLI) — goes through ``apply_items`` too. Schema changes (migrations, a downgrade and
   upgrade that empties the tables) write no event: they change the **schema cookie**
   (``PRAGMA schema_version``), which the mark holds.
2. **The mark's event names the history up to it.** Each event's hash covers its content and
   its predecessor's hash, back to the genesis of the ``store_id``. The event at the mark's seq
   kept with the mark's hash means the same history up to the mark: not ``reset_identity``
   (which re-chains every hash), not another copy of the store restored over it, not a
   rolled-back write (whose seq is handed out again with another hash, or not at all).
3. **Every event since is there, and none is the kind's.** ``prune_history`` removes events but
   never an item's state: it may remove those after the mark (a set and the delete that
   undid it). So the events after the mark are counted and must number exactly the seqs handed
   out since (the high-water mark, which counts the floor prune leaves when it removes the
   newest events): none was removed, so none of them being of the kind's family proves that no
   item changed.

Items a sync wrote are held only once its transaction has committed (the store's caller
checks that the sync opened the transaction rather than joining a ``transaction()`` block, and
holds them after the commit); taking them for a sync leaves nothing held, so a sync that fails,
or is rolled back with its block, leaves nothing behind. The check reads three values by key
and, when other events came since, at most :data:`LIMIT` events by a range of the rowid
B-tree: its cost does not grow with the items. Writes from outside podstore (raw SQL on the
file) that bypass the history are not seen (they leave the history disagreeing with the
tables anyway).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass

from podstore.storage.node.items import Items, Part
from podstore.storage.sql import node as sql

#: Past this many events since the mark, the items are read back rather than the events.
LIMIT = 1_000


@dataclass(frozen=True, slots=True)
class Mark:
    """Where a sync left the store: the schema cookie, and the newest kept event."""

    schema: int
    seq: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class Held:
    """A kind's items as the store held them at ``mark``; ``generation``: the fast read
    (``delta.Delta``) whose items they equal, if they came from one."""

    items: Items
    mark: Mark
    generation: int | None = None


def mark(conn: sqlite3.Connection) -> Mark | None:
    """Where the store stands now (None: no event is kept, nothing can be told from one)."""
    schema, seq, digest = conn.execute(sql.HELD_MARK).fetchone()
    if seq is None:
        return None
    return Mark(int(schema), int(seq), bytes(digest))


def still_held(conn: sqlite3.Connection, part: Part, held: Held | None) -> Items | None:
    """``held.items`` when the store provably still holds them (see the module docstring),
    else None. Run it inside the write transaction that will use them."""
    if held is None:
        return None
    at = held.mark
    schema, digest, high = conn.execute(sql.HELD_SINCE, {"seq": at.seq}).fetchone()
    if int(schema) != at.schema or digest is None or bytes(digest) != at.hash:
        return None
    since = int(high) - at.seq
    if since == 0:
        return held.items
    if since < 0 or since > LIMIT:
        return None
    count, ours = conn.execute(
        sql.HELD_EVENTS_SINCE,
        {
            "seq": at.seq,
            "limit": since,
            "set_op": f"{part.family}-set",
            "delete_op": f"{part.family}-delete",
        },
    ).fetchone()
    if int(count) != since or int(ours):
        return None
    return held.items


class HeldItems:
    """One kind's :class:`Held` on a PodStore. The lock guards only taking and keeping (the
    check, made in the write transaction, is what makes the items valid), so it is never held
    while waiting for the store's write lock."""

    __slots__ = ("_held", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Held | None = None

    def take(self) -> Held | None:
        """What is held, leaving nothing held: a sync that fails or is rolled back after
        changing the items leaves nothing behind."""
        with self._lock:
            held, self._held = self._held, None
            return held

    @property
    def held(self) -> Held | None:
        """What is held now (for tests and diagnostics; a sync uses :meth:`take`)."""
        return self._held

    def keep(self, held: Held | None) -> None:
        """Hold what a sync whose transaction has committed ended with."""
        with self._lock:
            self._held = held
