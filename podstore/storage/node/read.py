"""Shaping the rows of the node's reads (``storage/sql/node_read.py``) into typed results."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from podstore.checkpoint import DRAClaim, MemoryBlock
from podstore.storage.node import dra
from podstore.storage.sql import node_read as sql
from podstore.types import ContainerNuma


def _nodes(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(int(n) for n in json.loads(text))


def container_numa(row: tuple[Any, ...]) -> ContainerNuma:
    """A ``v_container_numa`` row (in ``node_read.CONTAINER_NUMA`` column order)."""
    pod, namespace, name, container, dev, cpu, mem, aligned = row
    return ContainerNuma(
        pod,
        namespace,
        name,
        container,
        _nodes(dev),
        _nodes(cpu),
        _nodes(mem),
        None if aligned is None else bool(aligned),
    )


def pod_cpus(conn: sqlite3.Connection, pod_uid: str) -> dict[str | None, frozenset[int]]:
    """Container → exclusive CPUs of one pod (None: the pod's own cpuset)."""
    out: dict[str | None, set[int]] = {}
    for container, cpu in conn.execute(sql.POD_CPUS, (pod_uid,)):
        container_cpus = out.setdefault(container, set())
        if cpu is not None:
            container_cpus.add(int(cpu))
    return {c: frozenset(cpus) for c, cpus in out.items()}


def pod_memory(conn: sqlite3.Connection, pod_uid: str) -> dict[str | None, list[MemoryBlock]]:
    """Container → memory blocks of one pod (None: the pod's own), in list order."""
    out: dict[str | None, list[MemoryBlock]] = {}
    blocks: dict[tuple[int, int], MemoryBlock] = {}
    for aid, container, pos, mtype, size, affinity_null, numa in conn.execute(
        sql.POD_MEMORY, (pod_uid,)
    ):
        block = blocks.get((aid, pos))
        if block is None:
            block = blocks[(aid, pos)] = MemoryBlock(
                None if affinity_null else [], str(mtype), int(size)
            )
            out.setdefault(container, []).append(block)
        if numa is not None and block.numa_affinity is not None:
            block.numa_affinity.append(int(numa))
    return out


def pod_claims(conn: sqlite3.Connection, pod_uid: str) -> list[DRAClaim]:
    """The DRA claims one pod uses, in list order."""
    found = (dra.claim(conn, str(uid)) for (uid,) in conn.execute(sql.POD_CLAIM_UIDS, (pod_uid,)))
    return [c for c in found if c is not None]


def dra_owners_at(
    conn: sqlite3.Connection, device: str, when: str
) -> list[tuple[str | None, str, str, str, str | None]]:
    """(pod, namespace, claim name, claim UID, share id) of every claim using ``device``
    (``driver/pool/device``) at ``when``, from the history; a claim no pod used, once."""
    parts = dra.split_device_key(device)
    if parts is None:
        return []
    driver, pool, name = parts
    out: list[tuple[str | None, str, str, str, str | None]] = []
    for resource, text in conn.execute(sql.DRA_CLAIMS_AT, {"device_id": device, "when": when}):
        claim = json.loads(text)
        share = next(
            (
                x.get("shareID")
                for x in (claim.get("drivers") or {}).get(driver) or ()
                if x["pool"] == pool and x["device"] == name
            ),
            None,
        )
        uid = str(resource)[len(dra.PREFIX) :]
        pods = claim.get("pods") or [None]
        out.extend((p, claim["namespace"], claim["name"], uid, share) for p in pods)
    return sorted(out, key=lambda r: (r[0] or "", r[1], r[2], r[3]))
