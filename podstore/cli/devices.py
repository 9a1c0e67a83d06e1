"""``podstore devices`` and ``podstore owners DEVICE_ID``: who holds which device."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import click

from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.reading import Reader
from podstore.storage.sql import audit

DEVICES_COLUMNS = ["resource", "device_id", "numa_nodes", "registered", "pod_uid", "container"]

OWNERS_COLUMNS = ["pod_uid", "container", "resource"]


@click.command()
@click.option("--resource", "-r", metavar="R", default=None, help="Only devices of resource R.")
@output_option
@click.pass_obj
def devices(ctx: Context, resource: str | None, output: str) -> None:
    """List devices: every held device once per holder, then registered devices nobody holds.

    NUMA_NODES are the NUMA ids the holder's entry lists the device under (-1: no topology);
    REGISTERED says whether the device plugin registered it.
    """
    with ctx.store(readonly=True).reader() as reader:
        emit(_devices(reader, resource), DEVICES_COLUMNS, output)


def _devices(reader: Reader, only: str | None) -> Iterator[dict[str, Any]]:
    """The rows of ``podstore devices``, streamed: per resource, held and free devices merged
    in device id order (code point order is SQLite's byte order)."""
    resources = [r[0] for r in reader.stream(audit.DEVICE_RESOURCES, {"resource": only})]
    for resource in resources:
        params = {"resource": resource}
        held = _holders(resource, reader.stream(audit.HELD_DEVICES, params))
        free = reader.stream(audit.FREE_REGISTERED, params)
        next_held = next(held, None)
        next_free = next(free, None)
        while next_held is not None or next_free is not None:
            if next_free is None or (next_held is not None and next_held[0] < next_free[0]):
                assert next_held is not None
                yield from next_held[1]
                next_held = next(held, None)
            else:
                yield _row(resource, next_free[0], [], True, None, None)
                next_free = next(free, None)


def _holders(
    resource: str, rows: Iterable[tuple[Any, ...]]
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
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
) -> list[dict[str, Any]]:
    return [
        _row(resource, device, sorted(numa), registered, pod, container)
        for (pod, container), numa in sorted(nodes.items())
    ]


def _row(
    resource: str,
    device_id: str,
    numa_nodes: list[int],
    registered: bool,
    pod_uid: str | None,
    container: str | None,
) -> dict[str, Any]:
    return {
        "resource": resource,
        "device_id": device_id,
        "numa_nodes": numa_nodes,
        "registered": registered,
        "pod_uid": pod_uid,
        "container": container,
    }


@click.command()
@click.argument("device_id")
@click.option(
    "--at",
    "at",
    callback=parse_time,
    default=None,
    help="Who held it at this instant (ISO 8601; UTC unless an offset is given), from the "
    "allocation history.",
)
@output_option
@click.pass_obj
def owners(ctx: Context, device_id: str, at: str | None, output: str) -> None:
    """List the containers holding DEVICE_ID (in any resource) — now, or --at a past time.

    No holder is an empty answer, not an error (exit status 0).
    """
    store = ctx.store(readonly=True)
    if at is not None:
        # The holders at one instant: a handful of rows.
        _emit_owners(store.owners_at(device_id, at), output)
        return
    with store.reader() as reader:
        _emit_owners(reader.stream(audit.OWNERS_NOW, {"device": device_id}), output)


def _emit_owners(found: Iterable[tuple[Any, ...]], output: str) -> None:
    emit((dict(zip(OWNERS_COLUMNS, r, strict=True)) for r in found), OWNERS_COLUMNS, output)
