"""Writing a kind the store holds back as the checkpoint file kubelet would write for it."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from podstore.checkpoint import (
    CPUManagerState,
    DRAState,
    MemoryManagerState,
    dumps_cpu_state,
    dumps_dra_state,
    dumps_memory_state,
)
from podstore.checkpoint.downgrade import node_state_as
from podstore.errors import InvalidInputError
from podstore.storage.node import cpu, dra, memory


def checkpoint_bytes(kind: str, state: Any) -> bytes:
    """The file kubelet would write for ``state``, in the format it was read in (the data
    format for DRA v1, CPU v2 for CPU v1: neither old format is written any more).

    Raises InvalidInputError for what those formats cannot carry (CPU v1 entries keyed by
    container id, classic DRA v1 claims) and for values of the wrong type or range.
    """
    if kind == "cpu" and isinstance(state, CPUManagerState):
        if state.version == 1:
            state = dataclasses.replace(state, version=2)
        return dumps_cpu_state(state)
    if kind == "memory" and isinstance(state, MemoryManagerState):
        return dumps_memory_state(state)
    if kind == "dra" and isinstance(state, DRAState):
        if state.version != "data":
            if any(c.driver_state is None for c in state.claims or ()):
                raise InvalidInputError(
                    "the DRA claims came from a classic DRA v1 checkpoint (driver, class, "
                    "resource handles): the data format kubelet writes today cannot hold them"
                )
            state = dataclasses.replace(state, version="data")
        return dumps_dra_state(state)
    raise InvalidInputError(f"state: expected the {kind} manager's state, got {state!r:.80}")


def export_bytes(conn: sqlite3.Connection, kind: str) -> bytes:
    """:func:`checkpoint_bytes` of the store's ``kind``. Raises InvalidInputError also when the
    store holds no checkpoint of ``kind``."""
    return checkpoint_bytes(kind, stored_state(conn, kind))


def export_bytes_as(conn: sqlite3.Connection, kind: str, fmt: str) -> tuple[bytes, list[str]]:
    """The store's ``kind`` written in the format ``fmt`` as the release that writes it does
    (checkpoint.downgrade), and what that format could not hold (written without it)."""
    state, drops = node_state_as(kind, stored_state(conn, kind), fmt)
    # The writers themselves, not checkpoint_bytes: the format is chosen, never replaced.
    if kind == "cpu":
        return dumps_cpu_state(state), drops
    if kind == "memory":
        return dumps_memory_state(state), drops
    return dumps_dra_state(state), drops


def stored_state(conn: sqlite3.Connection, kind: str) -> Any:
    """The store's state of ``kind``; InvalidInputError when it holds none."""
    readers = {"cpu": cpu.read_state, "memory": memory.read_state, "dra": dra.read_state}
    if kind not in readers:
        raise InvalidInputError(f"kind must be cpu, memory or dra, not {kind!r}")
    state = readers[kind](conn)
    if state is None:
        raise InvalidInputError(
            f"the store holds no {kind} manager checkpoint (import one first: "
            f"`podstore import FILE --kind {kind}` or `podstore import-node`)"
        )
    return state
