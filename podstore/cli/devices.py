"""``podstore devices`` and ``podstore owners DEVICE_ID``: who holds which device."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.main import cli
from podstore.cli.output import emit, output_option

# Every held device once per holder (with its NUMA ids and whether it is registered), then
# every registered device nobody holds.
DEVICES = """
    SELECT o.resource, o.device_id,
           (SELECT group_concat(DISTINCT v.numa_node) FROM v_allocations v
            WHERE v.resource = o.resource AND v.device_id = o.device_id
              AND v.pod_uid = o.pod_uid AND v.container = o.container),
           EXISTS (SELECT 1 FROM registered_devices r
                   WHERE r.resource = o.resource AND r.device_id = o.device_id),
           o.pod_uid, o.container
    FROM v_device_owners o
    WHERE :resource IS NULL OR o.resource = :resource
    UNION ALL
    SELECT DISTINCT r.resource, r.device_id, NULL, 1, NULL, NULL
    FROM registered_devices r
    WHERE (:resource IS NULL OR r.resource = :resource)
      AND NOT EXISTS (SELECT 1 FROM v_device_owners o
                      WHERE o.resource = r.resource AND o.device_id = r.device_id)
    ORDER BY 1, 2, 5, 6
"""
DEVICES_COLUMNS = ["resource", "device_id", "numa_nodes", "registered", "pod_uid", "container"]

OWNERS_NOW = """
    SELECT pod_uid, container, resource FROM v_device_owners WHERE device_id = :device
    ORDER BY 1, 2, 3
"""
OWNERS_COLUMNS = ["pod_uid", "container", "resource"]


@cli.command()
@click.option("--resource", "-r", metavar="R", default=None, help="Only devices of resource R.")
@output_option
@click.pass_obj
def devices(ctx: Context, resource: str | None, output: str) -> None:
    """List devices: every held device once per holder, then registered devices nobody holds.

    NUMA_NODES are the NUMA ids the holder's entry lists the device under (-1: no topology);
    REGISTERED says whether the device plugin registered it.
    """
    store = ctx.store(readonly=True)
    rows: list[dict[str, Any]] = []
    for res, device_id, nodes, registered, pod_uid, container in store.query(
        DEVICES, {"resource": resource}
    ).rows:
        rows.append(
            {
                "resource": res,
                "device_id": device_id,
                "numa_nodes": sorted(int(n) for n in str(nodes).split(",")) if nodes else [],
                "registered": bool(registered),
                "pod_uid": pod_uid,
                "container": container,
            }
        )
    emit(rows, DEVICES_COLUMNS, output)


@cli.command()
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
    if at is None:
        found = [tuple(r) for r in store.query(OWNERS_NOW, {"device": device_id}).rows]
    else:
        found = [tuple(r) for r in store.owners_at(device_id, at)]
    emit([dict(zip(OWNERS_COLUMNS, r, strict=True)) for r in found], OWNERS_COLUMNS, output)
