"""The node's events read back: as ``AllocationEvent`` s, and replayed into the items they
describe (the other half of ``events.replay``, which keeps to the device manager's)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from podstore.pure.times import parse_ts
from podstore.storage.ops import NODE_EVENT_OPS
from podstore.types import AllocationEvent

Key = tuple[str | None, str | None, str]


def is_node_op(op: str) -> bool:
    return op in NODE_EVENT_OPS


def to_event(row: Sequence[Any]) -> AllocationEvent:
    """A node event's row (``sql.history_sql`` column order) as an event: ``payload`` is its
    JSON, ``device_ids`` the devices it names (DRA claims), ``released`` those it gave up."""
    seq, ts, op, pod, container, resource, text, released = row
    payload = None if text is None else json.loads(text)
    named = None if op == "end" else named_devices(resource, payload)
    gone: list[str] = [] if released is None else list(json.loads(released))
    return AllocationEvent(
        int(seq), parse_ts(ts), op, pod, container, resource, named, gone, payload
    )


def named_devices(resource: str, payload: Any) -> list[str] | None:
    """The devices a node event's payload names (``driver/pool/device`` of a DRA claim,
    sorted and distinct); None for the other kinds, which name no device."""
    if not resource.startswith("dra:") or not isinstance(payload, dict):
        return None
    drivers = payload.get("drivers") or {}
    return sorted(
        {f"{d}/{x['pool']}/{x['device']}" for d, devs in drivers.items() for x in devs or ()}
    )


def replay(events: Iterable[AllocationEvent]) -> dict[Key, str]:
    """The node's items the events describe, in order from empty: key → payload JSON text
    (``-set`` writes the item, ``-delete`` removes it). Device events are passed over."""
    out: dict[Key, str] = {}
    for ev in events:
        if not is_node_op(ev.op):
            continue
        key = (ev.pod_uid, ev.container_name, ev.resource_name)
        if ev.op.endswith("-delete"):
            out.pop(key, None)
        else:
            out[key] = json.dumps(ev.payload, ensure_ascii=False, separators=(",", ":"))
    return out
