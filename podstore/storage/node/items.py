"""Items: what a sync of the node's other managers compares, writes and records.

An item is one thing a kind holds, under the key its history events carry:

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

No device plugin resource is spelled so (an extended resource name holds a ``/``; kubelet
never hands ``cpu`` or ``memory`` to a plugin). ``canon``, what two values of one key are
compared by, is the payload with every list whose order kubelet gives no meaning sorted: a
rewrite that only reorders a file writes no event.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring
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
    canon: str
    value: Any
    devices: tuple[str, ...] = ()


Items = dict[Key, Item]


def int_list(values: Iterable[int]) -> Item:
    """An item of integers given sorted: what :func:`plain` makes of them, made faster (a
    1,000-pod CPU file has thousands)."""
    text = "[" + ",".join(map(str, values)) + "]"
    return Item(text, text, values)


def key_text(key: Key) -> str:
    """A key as the JSON text of ``[pod_uid, container, resource]`` (``node_items.item_key``):
    what :func:`dumps` makes of it, made faster."""
    return "[" + ",".join("null" if k is None else encode_basestring(k) for k in key) + "]"


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

    #: Its name in ``node_items.part`` (cpu, memory, dra, topology, names).
    name: str
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
