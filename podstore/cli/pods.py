"""``podstore pods`` and ``podstore get POD_UID``: what each pod holds."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.common import complete_pods, not_found
from podstore.cli.context import Context
from podstore.cli.main import cli
from podstore.cli.output import emit, output_option

PODS = """
    SELECT p.uid,
           (SELECT count(*) FROM containers c WHERE c.pod_id = p.id),
           (SELECT count(*) FROM containers c JOIN allocations a ON a.container_id = c.id
            WHERE c.pod_id = p.id),
           (SELECT count(*) FROM (
                SELECT DISTINCT a.resource, d.device_id
                FROM containers c
                JOIN allocations a ON a.container_id = c.id
                JOIN allocation_devices d ON d.allocation_id = a.id
                WHERE c.pod_id = p.id))
    FROM pods p
    ORDER BY p.uid
"""
POD_RESOURCES = """
    SELECT DISTINCT p.uid, a.resource
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    ORDER BY p.uid, a.resource
"""
PODS_COLUMNS = ["pod_uid", "containers", "entries", "devices", "resources"]

# One pod's entries by NUMA node: device rows, NUMA keys holding an empty (or null) list, and a
# NULL row for an entry with no NUMA keys at all.
POD_ENTRIES = """
    SELECT c.name, a.resource, d.numa_node, d.position, d.device_id
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    LEFT JOIN allocation_devices d ON d.allocation_id = a.id
    WHERE p.uid = :pod
      AND (d.device_id IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM empty_numa_lists e WHERE e.allocation_id = a.id))
    UNION ALL
    SELECT c.name, a.resource, e.numa_node, -1, NULL
    FROM pods p
    JOIN containers c ON c.pod_id = p.id
    JOIN allocations a ON a.container_id = c.id
    JOIN empty_numa_lists e ON e.allocation_id = a.id
    WHERE p.uid = :pod
    ORDER BY 1, 2, 3, 4
"""
GET_COLUMNS = ["container", "resource", "numa_node", "device_ids"]


@cli.command()
@output_option
@click.pass_obj
def pods(ctx: Context, output: str) -> None:
    """List the pods: containers, entries, distinct devices and resources of each."""
    store = ctx.store(readonly=True)
    resources: dict[str, list[str]] = {}
    for uid, resource in store.query(POD_RESOURCES).rows:
        resources.setdefault(uid, []).append(resource)
    rows = [
        {
            "pod_uid": uid,
            "containers": containers,
            "entries": entries,
            "devices": devices,
            "resources": resources.get(uid, []),
        }
        for uid, containers, entries, devices in store.query(PODS).rows
    ]
    emit(rows, PODS_COLUMNS, output)


@cli.command()
@click.argument("pod_uid", shell_complete=complete_pods)
@output_option
@click.pass_obj
def get(ctx: Context, pod_uid: str, output: str) -> None:
    """Show what POD_UID holds: one row per container, resource and NUMA node.

    NUMA node -1 means "no topology"; an entry without devices shows an empty list. Exit
    status 1 if the pod is unknown.
    """
    store = ctx.store(readonly=True)
    rows: list[dict[str, Any]] = []
    for container, resource, node, _pos, device_id in store.query(
        POD_ENTRIES, {"pod": pod_uid}
    ).rows:
        last = rows[-1] if rows else None
        if last is None or (last["container"], last["resource"], last["numa_node"]) != (
            container,
            resource,
            node,
        ):
            last = {"container": container, "resource": resource, "numa_node": node}
            last["device_ids"] = []
            rows.append(last)
        if device_id is not None:
            last["device_ids"].append(device_id)
    if not rows:
        not_found(f"pod {pod_uid!r} not found")
    emit(rows, GET_COLUMNS, output)
