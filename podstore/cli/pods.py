"""``podstore pods`` and ``podstore get POD_UID``: what each pod holds — devices, and the CPU,
memory and DRA managers' share — with its namespace and name when known."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import click

from podstore.checkpoint import format_cpuset
from podstore.cli.common import complete_pods, not_found
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.store import PodStore
from podstore.types import NodePodSummary, PodSummary

PODS_COLUMNS = [
    "pod_uid",
    "containers",
    "entries",
    "devices",
    "resources",
    "namespace",
    "name",
    "cpus",
    "memory_bytes",
    "claims",
]

GET_COLUMNS = [
    "container",
    "resource",
    "numa_node",
    "device_ids",
    "manager",
    "size_bytes",
    "claim",
    "namespace",
    "pod_name",
]


def _pod_rows(
    devices: Iterable[PodSummary], node: list[NodePodSummary], names: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The device pods (streamed in uid order) merged with the pods the other managers know."""
    others = iter(node)
    pending = next(others, None)

    def row(uid: str, pod: PodSummary | None, node_pod: NodePodSummary | None) -> dict[str, Any]:
        name = names.get(uid)
        return {
            "pod_uid": uid,
            # Every manager's containers, where the others know the pod.
            "containers": node_pod.containers if node_pod else pod.containers if pod else 0,
            "entries": pod.entries if pod else 0,
            "devices": pod.devices if pod else 0,
            "resources": list(pod.resources) if pod else [],
            "namespace": name.namespace if name else None,
            "name": name.name if name else None,
            "cpus": node_pod.cpus if node_pod else 0,
            "memory_bytes": node_pod.memory_bytes if node_pod else 0,
            "claims": node_pod.claims if node_pod else 0,
        }

    for pod in devices:
        while pending is not None and pending.pod_uid < pod.pod_uid:
            yield row(pending.pod_uid, None, pending)
            pending = next(others, None)
        if pending is not None and pending.pod_uid == pod.pod_uid:
            yield row(pod.pod_uid, pod, pending)
            pending = next(others, None)
        else:
            yield row(pod.pod_uid, pod, None)
    while pending is not None:
        yield row(pending.pod_uid, None, pending)
        pending = next(others, None)


@click.command()
@output_option
@click.pass_obj
def pods(ctx: Context, output: str) -> None:
    """List the pods: containers, entries, distinct devices and resources of each (device
    plugins), namespace and name when known, exclusive CPUs, memory bytes and DRA claims."""
    store = ctx.store(readonly=True)
    names = store.pod_names()
    node = store.node_pods()
    with store.reader() as reader:
        emit(_pod_rows(reader.pods(), node, names), PODS_COLUMNS, output)


def _get_rows(store: PodStore, pod_uid: str) -> list[dict[str, Any]]:
    name = store.pod_names().get(pod_uid)
    tail = {
        "namespace": name.namespace if name else None,
        "pod_name": name.name if name else None,
    }
    rows: list[dict[str, Any]] = []  # one pod's holdings: a handful of rows

    def add(
        container: str | None, resource: str, numa: int | None, ids: list[Any], **kw: Any
    ) -> None:
        rows.append(
            {
                "container": container,
                "resource": resource,
                "numa_node": numa,
                "device_ids": ids,
                "manager": kw.get("manager", "devices"),
                "size_bytes": kw.get("size"),
                "claim": kw.get("claim"),
                **tail,
            }
        )

    listed = sorted(store.pod_entries(pod_uid), key=lambda e: (e.container_name, e.resource_name))
    for entry in listed:
        if not entry.device_ids:
            # No NUMA keys at all (or a null map): one row without a node.
            add(entry.container_name, entry.resource_name, None, [])
            continue
        for node, ids in sorted(entry.device_ids.items()):
            add(entry.container_name, entry.resource_name, node, list(ids or ()))
    topology = store.numa_topology()
    node_of = topology.cpu_nodes() if topology is not None else {}
    for container, cpus in sorted(store.pod_cpus(pod_uid).items(), key=_container_order):
        by_node: dict[int | None, list[int]] = {}
        for cpu in sorted(cpus):
            by_node.setdefault(node_of.get(cpu), []).append(cpu)
        for numa, numa_cpus in sorted(by_node.items(), key=lambda x: (x[0] is None, x[0] or 0)):
            add(container, "cpu", numa, [format_cpuset(frozenset(numa_cpus))], manager="cpu")
    for container, blocks in sorted(store.pod_memory(pod_uid).items(), key=_container_order):
        for block in blocks:
            # A block taken from several NUMA nodes shows on each, with its size.
            nodes: list[int | None] = [*sorted(set(block.numa_affinity or ()))] or [None]
            for numa in nodes:
                add(container, block.type, numa, [], manager="memory", size=block.size)
    for claim in store.pod_claims(pod_uid):
        for driver, devices in sorted((claim.driver_state or {}).items()):
            add(
                None,
                driver,
                None,
                [f"{d.pool_name}/{d.device_name}" for d in devices or ()],
                manager="dra",
                claim=f"{claim.namespace}/{claim.claim_name}",
            )
    return rows


def _container_order(item: tuple[str | None, Any]) -> tuple[bool, str]:
    return (item[0] is not None, item[0] or "")


@click.command()
@click.argument("pod_uid", shell_complete=complete_pods)
@output_option
@click.pass_obj
def get(ctx: Context, pod_uid: str, output: str) -> None:
    """Show what POD_UID holds: devices per container, resource and NUMA node; exclusive CPUs
    per NUMA node (as a CPU list); memory blocks by type and NUMA node (SIZE_BYTES); DRA
    devices by driver (POOL/DEVICE) and claim. A blank container is the pod's own.

    NUMA node -1 means "no topology" (device plugins); blank: not known. Exit status 1 if the
    pod is unknown.
    """
    rows = _get_rows(ctx.store(readonly=True), pod_uid)
    if not rows:
        not_found(f"pod {pod_uid!r} not found")
    emit(rows, GET_COLUMNS, output)
