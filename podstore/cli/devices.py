"""``podstore devices`` and ``podstore owners DEVICE_ID``: who holds which device."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.types import DeviceHolding

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
        emit(map(_row, reader.devices(resource)), DEVICES_COLUMNS, output)


def _row(held: DeviceHolding) -> dict[str, Any]:
    return {
        "resource": held.resource,
        "device_id": held.device_id,
        "numa_nodes": list(held.numa_nodes),
        "registered": held.registered,
        "pod_uid": held.pod_uid,
        "container": held.container,
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
        _emit_owners(
            ((o.pod_uid, o.container, o.resource) for o in reader.owners(device_id)), output
        )


def _emit_owners(found: Iterable[tuple[str, str, str]], output: str) -> None:
    emit((dict(zip(OWNERS_COLUMNS, r, strict=True)) for r in found), OWNERS_COLUMNS, output)
