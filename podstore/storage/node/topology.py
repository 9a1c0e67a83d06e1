"""The ``topology`` summary: per NUMA node, CPUs (exclusive by container, the shared pool),
memory by type, devices by resource and DRA devices by driver, with their holders."""

from __future__ import annotations

import sqlite3

from podstore.checkpoint import format_cpuset
from podstore.storage.sql import node_read as sql
from podstore.types import NumaUsage

Node = int | None


def _who(pod: str | None, namespace: str | None, name: str | None, container: str | None) -> str:
    owner = f"{namespace}/{name}" if name is not None else (pod or "")
    return owner if container is None else f"{owner}/{container}"


def summary(conn: sqlite3.Connection) -> list[NumaUsage]:
    """Every line of the summary, NUMA nodes in order (the unknown one last)."""
    kinds = {"cpu": 0, "memory": 1, "device": 2, "dra": 3}
    return sorted(
        [*_cpus(conn), *_memory(conn), *_devices(conn), *_dra(conn)],
        key=lambda r: (r.numa_node is None, r.numa_node or 0, kinds[r.kind], r.name),
    )


def _cpus(conn: sqlite3.Connection) -> list[NumaUsage]:
    totals: dict[Node, int] = {int(n): int(c) for n, c in conn.execute(sql.TOPOLOGY_CPUS)}
    exclusive: dict[Node, list[int]] = {}
    holders: dict[Node, list[str]] = {}
    for node, pod, ns, name, container, cpus in conn.execute(sql.TOPOLOGY_EXCLUSIVE):
        ids = [int(c) for c in str(cpus).split(",")]
        exclusive.setdefault(node, []).extend(ids)
        holders.setdefault(node, []).append(
            f"{_who(pod, ns, name, container)}={format_cpuset(frozenset(ids))}"
        )
    shared: dict[Node, int] = {n: int(c) for n, c in conn.execute(sql.TOPOLOGY_SHARED)}
    out = []
    for node in sorted(
        set(totals) | set(exclusive) | set(shared), key=lambda n: (n is None, n or 0)
    ):
        if node in totals or node in exclusive:
            out.append(
                NumaUsage(
                    node,
                    "cpu",
                    "exclusive",
                    len(exclusive.get(node, ())),
                    None,
                    totals.get(node),
                    tuple(holders.get(node, ())),
                )
            )
        if node in shared or node in totals:
            out.append(NumaUsage(node, "cpu", "shared", shared.get(node, 0), None, None, ()))
    return out


def _memory(conn: sqlite3.Connection) -> list[NumaUsage]:
    holders: dict[tuple[int, str], list[str]] = {}
    for node, mtype, pod, ns, name, container, size in conn.execute(sql.TOPOLOGY_MEMORY_HOLDERS):
        holders.setdefault((int(node), str(mtype)), []).append(
            f"{_who(pod, ns, name, container)}={int(size)}"
        )
    return [
        NumaUsage(
            int(node),
            "memory",
            str(mtype),
            int(reserved),
            int(free),
            int(allocatable),
            tuple(holders.get((int(node), str(mtype)), ())),
        )
        for node, mtype, allocatable, reserved, free in conn.execute(sql.TOPOLOGY_MEMORY)
    ]


def _devices(conn: sqlite3.Connection) -> list[NumaUsage]:
    in_use: dict[tuple[Node, str], int] = {}
    holders: dict[tuple[Node, str], list[str]] = {}
    for node, resource, pod, ns, name, container, ids in conn.execute(sql.TOPOLOGY_DEVICES):
        key = (None if node is None else int(node), str(resource))
        listed = sorted(set(str(ids).split("\x1f")))
        in_use[key] = in_use.get(key, 0) + len(listed)
        holders.setdefault(key, []).append(f"{_who(pod, ns, name, container)}={','.join(listed)}")
    free = {str(r): int(c) for r, c in conn.execute(sql.TOPOLOGY_FREE_DEVICES)}
    keys = set(in_use) | {(None, r) for r in free}
    return [
        NumaUsage(
            node,
            "device",
            resource,
            in_use.get((node, resource), 0),
            free.get(resource, 0) if node is None else None,
            None,
            tuple(holders.get((node, resource), ())),
        )
        for node, resource in keys
    ]


def _dra(conn: sqlite3.Connection) -> list[NumaUsage]:
    in_use: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    for driver, ns, claim, count in conn.execute(sql.TOPOLOGY_DRA):
        in_use[driver] = in_use.get(driver, 0) + int(count)
        holders.setdefault(driver, []).append(f"{ns}/{claim}={int(count)}")
    return [
        NumaUsage(None, "dra", d, in_use[d], None, None, tuple(holders[d])) for d in sorted(in_use)
    ]
