"""Which items a fast read can have changed since the read before it, so that a sync need
not compare every item of a file whose rewrite changed one.

A member of the last file found again in this one (a hit, :mod:`.members`) is the same text,
so it gives the same items; a key can hold another item only where a member gave it that no
earlier file had (``fresh``), or one gave it that this file no longer holds (``dropped``), or
it is one of the kind's few keys outside every member (the shared CPUs, the policy). That
holds when in both files every key comes from one member only — no pod given twice, no key
two members both give — which the reader checks (``unique``); otherwise, or for the first
read of a state, the keys are unknown and the sync compares them all.

A :class:`Delta` is relative to one read (its ``base`` generation): the sync uses it only
when the items it starts from are those that very read gave (``held.Held.generation``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain, count
from operator import itemgetter
from typing import Any

from podstore.storage.node.items import Item, Items, Key
from podstore.storage.node.members import MemberCache

#: The items one converted member gives, in the order the read's items list them.
ItemsOf = Callable[[Any], Iterable[tuple[Key, Item]]]

# Unique in the process: a state, the store's held items and a prepared read are matched by it.
_GENERATIONS = count(1)
_VALUE = itemgetter(2)
_KEY = itemgetter(0)


@dataclass(frozen=True, slots=True)
class Delta:
    """What a fast read knows of its items against the read before it: that read's
    ``base`` generation (None: none), its own, the keys whose item may differ (``keys``, in
    the order the items list those they hold; None: unknown, compare every key), and the
    items this read has of them (``items``)."""

    base: int | None
    generation: int
    keys: tuple[Key, ...] | None
    items: Items


def new_delta(
    base: int | None,
    tables: Mapping[str, MemberCache],
    items_of: Mapping[str, ItemsOf],
    fixed: Items,
    unique: bool,
) -> Delta:
    """The delta of the read whose members ``tables`` hold (before they are committed):
    ``items_of`` names each table's items in the order the read's items list the tables,
    ``fixed`` the items outside every member (listed after them)."""
    generation = next(_GENERATIONS)
    if base is None or not unique or not items_of.keys() >= tables.keys():
        return Delta(base, generation, None, {})
    caches = [(tables[name], of) for name, of in items_of.items() if name in tables]
    fresh = [of(v) for cache, of in caches for v in map(_VALUE, cache.fresh)]
    gone = [of(v) for cache, of in caches for v in map(_VALUE, cache.dropped())]
    items = dict(chain.from_iterable(fresh))
    items.update(fixed)
    keys = dict.fromkeys(chain(items, map(_KEY, chain.from_iterable(gone))))
    return Delta(base, generation, tuple(keys), items)
