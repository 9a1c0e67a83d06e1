"""``podstore pods`` and ``podstore get POD_UID``: what each pod holds."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.common import complete_pods, not_found
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.types import PodSummary

PODS_COLUMNS = ["pod_uid", "containers", "entries", "devices", "resources"]

GET_COLUMNS = ["container", "resource", "numa_node", "device_ids"]


def _pod_row(pod: PodSummary) -> dict[str, Any]:
    return {
        "pod_uid": pod.pod_uid,
        "containers": pod.containers,
        "entries": pod.entries,
        "devices": pod.devices,
        "resources": list(pod.resources),
    }


@click.command()
@output_option
@click.pass_obj
def pods(ctx: Context, output: str) -> None:
    """List the pods: containers, entries, distinct devices and resources of each."""
    with ctx.store(readonly=True).reader() as reader:
        emit(map(_pod_row, reader.pods()), PODS_COLUMNS, output)


@click.command()
@click.argument("pod_uid", shell_complete=complete_pods)
@output_option
@click.pass_obj
def get(ctx: Context, pod_uid: str, output: str) -> None:
    """Show what POD_UID holds: one row per container, resource and NUMA node.

    NUMA node -1 means "no topology"; an entry without devices shows an empty list. Exit
    status 1 if the pod is unknown.
    """
    store = ctx.store(readonly=True)
    rows: list[dict[str, Any]] = []  # one pod's entries: a handful of rows
    listed = sorted(store.pod_entries(pod_uid), key=lambda e: (e.container_name, e.resource_name))
    for entry in listed:
        where = {"container": entry.container_name, "resource": entry.resource_name}
        if not entry.device_ids:
            # No NUMA keys at all (or a null map): one row without a node.
            rows.append({**where, "numa_node": None, "device_ids": []})
            continue
        for node, ids in sorted(entry.device_ids.items()):
            rows.append({**where, "numa_node": node, "device_ids": list(ids or ())})
    if not rows:
        not_found(f"pod {pod_uid!r} not found")
    emit(rows, GET_COLUMNS, output)
