"""``podstore devices`` and ``podstore owners DEVICE_ID``: who holds which device (device
plugins, and DRA devices named ``driver/pool/device``), with pod names when known."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import click

from podstore.checkpoint import PodName
from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.storage.node.dra import split_device_key
from podstore.types import DeviceHolding, DRAOwner

DEVICES_COLUMNS = [
    "resource",
    "device_id",
    "numa_nodes",
    "registered",
    "pod_uid",
    "container",
    "namespace",
    "name",
]

OWNERS_COLUMNS = ["pod_uid", "container", "resource", "namespace", "name", "claim"]


@click.command()
@click.option("--resource", "-r", metavar="R", default=None, help="Only devices of resource R.")
@output_option
@click.pass_obj
def devices(ctx: Context, resource: str | None, output: str) -> None:
    """List devices: every held device once per holder, then registered devices nobody holds.

    NUMA_NODES are the NUMA ids the holder's entry lists the device under (-1: no topology);
    REGISTERED says whether the device plugin registered it; NAMESPACE and NAME are the
    holding pod's, when known.
    """
    store = ctx.store(readonly=True)
    names = store.pod_names()
    with store.reader() as reader:
        emit((_row(h, names) for h in reader.devices(resource)), DEVICES_COLUMNS, output)


def _row(holding: DeviceHolding, names: Mapping[str, PodName]) -> dict[str, Any]:
    name = names.get(holding.pod_uid) if holding.pod_uid is not None else None
    return {
        "resource": holding.resource,
        "device_id": holding.device_id,
        "numa_nodes": list(holding.numa_nodes),
        "registered": holding.registered,
        "pod_uid": holding.pod_uid,
        "container": holding.container,
        "namespace": name.namespace if name else None,
        "name": name.name if name else None,
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

    A DRA device is named DRIVER/POOL/DEVICE: its rows are the pods using it through a claim
    (CLAIM: namespace/name; CONTAINER blank, RESOURCE the driver). No holder is an empty
    answer, not an error (exit status 0).
    """
    store = ctx.store(readonly=True)
    names = store.pod_names(past=at is not None)
    found: list[tuple[str | None, str | None, str, str | None]] = []
    dra = split_device_key(device_id)
    if at is not None:
        # The holders at one instant: a handful of rows.
        found = [(p, c, r, None) for p, c, r in store.owners_at(device_id, at)]
        if dra is not None:
            found += [_claim_row(o, dra[0]) for o in store.dra_owners_at(device_id, at)]
        _emit_owners(found, names, output)
        return
    if dra is not None:
        found = [_claim_row(o, dra[0]) for o in store.dra_owners(device_id)]
    with store.reader() as reader:
        _emit_owners(
            itertools.chain(
                ((o.pod_uid, o.container, o.resource, None) for o in reader.owners(device_id)),
                found,
            ),
            names,
            output,
        )


def _claim_row(owner: DRAOwner, driver: str) -> tuple[str | None, None, str, str]:
    return (owner.pod_uid, None, driver, f"{owner.namespace}/{owner.claim_name}")


def _emit_owners(
    found: Iterable[tuple[str | None, str | None, str, str | None]],
    names: Mapping[str, PodName],
    output: str,
) -> None:
    def row(pod: str | None, container: str | None, resource: str, claim: str | None) -> Any:
        name = names.get(pod) if pod is not None else None
        return {
            "pod_uid": pod,
            "container": container,
            "resource": resource,
            "namespace": name.namespace if name else None,
            "name": name.name if name else None,
            "claim": claim,
        }

    emit((row(*r) for r in found), OWNERS_COLUMNS, output)
