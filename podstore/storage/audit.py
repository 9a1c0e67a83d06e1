"""The operator's reads behind ``podstore pods``, ``devices`` and ``owners`` as typed rows,
streamed one device's holders at a time, whatever the store's size."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from podstore.storage.sql import audit as sql
from podstore.types import DeviceHolding, DeviceOwner, PodSummary

#: Runs one read-only statement and streams its rows (``Reader``'s guarded connection).
Rows = Callable[[str, dict[str, Any]], Iterable[tuple[Any, ...]]]


def pod_summary(row: tuple[Any, ...]) -> PodSummary:
    """A row of ``sql.PODS``."""
    uid, containers, entries, devices, resources = row
    # Names travel hex-encoded so that commas in them survive the concatenation; code point
    # order is UTF-8 byte order (SQLite's BINARY collation).
    names = (
        sorted(bytes.fromhex(h).decode("utf-8") for h in resources.split(",")) if resources else []
    )
    return PodSummary(uid, containers, entries, devices, tuple(names))


def device_owner(row: tuple[Any, ...]) -> DeviceOwner:
    """A row of ``sql.OWNERS_NOW``."""
    return DeviceOwner(row[0], row[1], row[2])


def device_holdings(rows: Rows, only: str | None) -> Iterator[DeviceHolding]:
    """Every held device once per holder, then the registered devices nobody holds, resource
    by resource in byte order, each resource's devices in device id order (the held and the
    free stream merged); ``only`` keeps one resource."""
    resources = [r[0] for r in rows(sql.DEVICE_RESOURCES, {"resource": only})]
    for resource in resources:
        params = {"resource": resource}
        held = _holders(resource, rows(sql.HELD_DEVICES, params))
        free = iter(rows(sql.FREE_REGISTERED, params))
        next_held = next(held, None)
        next_free = next(free, None)
        while next_held is not None or next_free is not None:
            if next_free is None or (next_held is not None and next_held[0] < next_free[0]):
                assert next_held is not None
                yield from next_held[1]
                next_held = next(held, None)
            else:
                yield DeviceHolding(resource, next_free[0], (), True, None, None)
                next_free = next(free, None)


def _holders(
    resource: str, rows: Iterable[tuple[Any, ...]]
) -> Iterator[tuple[str, list[DeviceHolding]]]:
    """(device id, its rows: one per holder, by pod and container) from HELD_DEVICES rows,
    which come in device id order: only one device's rows are held at a time."""
    device: str | None = None
    registered = False
    nodes: dict[tuple[str, str], set[int]] = {}
    for device_id, numa_node, pod_uid, container, is_registered in rows:
        if device_id != device:
            if device is not None:
                yield device, _rows_of(resource, device, registered, nodes)
            device, registered, nodes = device_id, bool(is_registered), {}
        nodes.setdefault((pod_uid, container), set()).add(int(numa_node))
    if device is not None:
        yield device, _rows_of(resource, device, registered, nodes)


def _rows_of(
    resource: str, device: str, registered: bool, nodes: dict[tuple[str, str], set[int]]
) -> list[DeviceHolding]:
    return [
        DeviceHolding(resource, device, tuple(sorted(numa)), registered, pod, container)
        for (pod, container), numa in sorted(nodes.items())
    ]
