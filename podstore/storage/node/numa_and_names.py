"""The node's facts beside the checkpoints: its NUMA topology (``numa:N`` items, the node's
CPUs as a sorted JSON array) and pod names (``pod-name`` items, ``{"namespace","name"}``).
Both are ``node-set`` / ``node-delete`` events."""

from __future__ import annotations

import json
import sqlite3

from podstore.checkpoint import NumaTopology, PodName, PodNames
from podstore.storage.node.items import Item, Items, Key, Part, plain
from podstore.storage.sql import node as sql
from podstore.storage.sql import node_read as sql_read

FAMILY = "node"
NUMA_PREFIX = "numa:"
NAME = "pod-name"


def topology_items(topology: NumaTopology | None) -> Items:
    if topology is None:
        return {}
    return {
        (None, None, f"{NUMA_PREFIX}{node}"): plain(sorted(cpus))
        for node, cpus in sorted(topology.nodes.items())
    }


def name_items(names: PodNames) -> Items:
    return {
        (uid, None, NAME): plain({"namespace": p.namespace, "name": p.name})
        for uid, p in sorted(names.pods.items())
    }


def _stored_topology(conn: sqlite3.Connection) -> Items:
    nodes: dict[int, list[int]] = {}
    for node, cpu in conn.execute(sql.NUMA_ROWS):
        nodes.setdefault(int(node), []).append(int(cpu))
    return {(None, None, f"{NUMA_PREFIX}{n}"): plain(cpus) for n, cpus in nodes.items()}


def _remove_topology(conn: sqlite3.Connection, key: Key, item: Item) -> None:
    conn.execute(sql.NUMA_DELETE_NODE, (int(key[2][len(NUMA_PREFIX) :]),))


def _write_topology(conn: sqlite3.Connection, key: Key, item: Item, old: Item | None) -> None:
    if old is not None:
        _remove_topology(conn, key, old)
    node = int(key[2][len(NUMA_PREFIX) :])
    conn.executemany(sql.NUMA_INSERT, [(cpu, node) for cpu in item.value])


def _stored_names(conn: sqlite3.Connection) -> Items:
    return {
        (str(uid), None, NAME): plain({"namespace": ns, "name": name})
        for uid, ns, name in conn.execute(sql.NAME_ROWS)
    }


def _remove_name(conn: sqlite3.Connection, key: Key, item: Item) -> None:
    conn.execute(sql.NAME_DELETE, (key[0],))


def _write_name(conn: sqlite3.Connection, key: Key, item: Item, old: Item | None) -> None:
    if old is not None:
        _remove_name(conn, key, old)
    conn.execute(sql.NAME_INSERT, (key[0], item.value["namespace"], item.value["name"]))


TOPOLOGY = Part("topology", FAMILY, _stored_topology, _remove_topology, _write_topology)
NAMES = Part("names", FAMILY, _stored_names, _remove_name, _write_name)


def read_topology(conn: sqlite3.Connection) -> NumaTopology | None:
    """The stored topology (None: none known)."""
    items = _stored_topology(conn).items()
    nodes = {int(key[2][len(NUMA_PREFIX) :]): frozenset(item.value) for key, item in items}
    return NumaTopology(nodes) if nodes else None


def read_names(conn: sqlite3.Connection) -> PodNames:
    return PodNames(
        {str(uid): PodName(str(ns), str(name)) for uid, ns, name in conn.execute(sql.NAME_ROWS)}
    )


def past_names(conn: sqlite3.Connection) -> dict[str, PodName]:
    """The last name the history recorded for each pod (also those no longer named)."""
    out: dict[str, PodName] = {}
    for uid, text in conn.execute(sql_read.PAST_NAMES):
        value = json.loads(text)
        out[str(uid)] = PodName(value["namespace"], value["name"])
    return out
