"""Items: what a sync of the node's other managers compares, writes and records.

An item is one thing a kind holds, under the key its history events carry —
``(pod_uid, container, resource)`` as ``allocation_events`` spells a key:

==========================  =========  ===========  ======================================
item                        pod_uid    container    resource
==========================  =========  ===========  ======================================
a container's CPUs          pod        container    ``cpu``
a pod's own CPUs            pod        NULL         ``cpu``
a CPU v1 entry              NULL       container id ``cpu``
the shared CPUs             NULL       NULL         ``cpu:shared``
the CPU manager's policy    NULL       NULL         ``cpu:policy``
a container's memory        pod        container    ``memory``
a pod's own memory          pod        NULL         ``memory``
a NUMA node's memory state  NULL       NULL         ``memory:numa:N``
the memory manager's policy NULL       NULL         ``memory:policy``
a DRA claim                 NULL       NULL         ``dra:CLAIM_UID``
a pod's name                pod        NULL         ``pod-name``
a NUMA node's CPUs          NULL       NULL         ``numa:N``
==========================  =========  ===========  ======================================

No device plugin resource can be spelled so (an extended resource name holds a ``/``, and
kubelet never hands ``cpu`` or ``memory`` to a plugin), so these keys never meet a device
entry's. An item's ``payload`` is the JSON its events carry; ``canon`` is what two values of
one key are compared by — the payload with every list whose order kubelet does not keep as a
meaning sorted — so a rewrite that only reorders a file changes nothing and writes no event.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from podstore.errors import InvalidInputError

Key = tuple[str | None, str | None, str]

#: The largest integer a store column holds (SQLite's 64-bit signed integer).
MAX_INTEGER = (1 << 63) - 1

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept (the form every payload is written in)."""
    return _JSON.encode(value)


@dataclass(frozen=True, slots=True)
class Item:
    """One item's value: its event payload, what it is compared by, what its kind's writer
    needs, and the devices it names (event device rows; DRA only), sorted."""

    payload: str | None
    canon: str | None
    value: Any
    devices: tuple[str, ...] = ()


Items = dict[Key, Item]


class LazyItems(Mapping[Key, Item]):
    """Items whose dict (in the source's order) is built by ``build`` only when something
    walks or looks them up; their count is known before. A sync that knows which keys changed
    (``delta.Delta``) needs no more than the count, and building thousands of items from
    their members costs more than the rest of a one-change sync."""

    __slots__ = ("_build", "_items", "_len")

    def __init__(self, build: Callable[[], Items], length: int) -> None:
        self._build: Callable[[], Items] | None = build
        self._items: Items | None = None
        self._len = length

    def full(self) -> Items:
        """The items, built on the first call."""
        if self._items is None:
            assert self._build is not None
            self._items, self._build = self._build(), None
            if len(self._items) != self._len:
                raise AssertionError(f"{len(self._items)} items built, {self._len} counted")
        return self._items

    def __getitem__(self, key: Key) -> Item:
        return self.full()[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self.full())

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        return key in self.full()

    def __repr__(self) -> str:
        return f"LazyItems({self.full()!r})"


def plain(value: Any) -> Item:
    """An item whose payload is its canon (sets given sorted, scalars)."""
    text = dumps(value)
    return Item(text, text, value)


def key_order(key: Key) -> tuple[str, str, str, int, int]:
    """A total order of keys (NULLs first), for events written in a stable order."""
    pod, container, resource = key
    return (pod or "", container or "", resource, pod is None, container is None)


@dataclass(frozen=True, slots=True)
class Part:
    """How one kind keeps its items: read them back, remove one, write one."""

    #: The event family: events are ``<family>-set`` and ``<family>-delete``.
    family: str
    stored: Callable[[sqlite3.Connection], Items]
    remove: Callable[[sqlite3.Connection, Key, Item], None]
    write: Callable[[sqlite3.Connection, Key, Item, Item | None], None]


def check_integer(value: int, where: str) -> int:
    """Refuse what a store column cannot hold (a uint64 above 2^63 - 1)."""
    if value > MAX_INTEGER:
        raise InvalidInputError(
            f"{where}: {value} is above {MAX_INTEGER}, the largest integer the store holds"
        )
    return value
