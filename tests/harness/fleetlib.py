"""Helpers of the fleet tests: node stores built through the API, and both sides' state."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from podstore import PodStore, replay_history
from podstore.fleet import db
from podstore.fleet.urls import resolve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubelet_internal_checkpoint"


def busy_node(path: Path, seed: int, *, pods: int = 12, rounds: int = 40) -> PodStore:
    """A store with every kind of event: inserts, replaces, deletes, an import, a
    from_checkpoint_data, registered-device changes, entries without devices."""
    rng = random.Random(seed)
    store = PodStore.open(path, durability="normal")
    store.import_checkpoint(EXAMPLE)
    devices = [f"GPU-{seed}-{i}" for i in range(8)]
    for _ in range(rounds):
        pod = f"pod-{rng.randrange(pods)}"
        action = rng.random()
        if action < 0.55:
            picked = rng.sample(devices, rng.randint(0, 3))
            numa: dict[int, list[str] | None] = {}
            for dev in picked:
                numa.setdefault(rng.choice([-1, 0, 1]), []).append(dev)  # type: ignore[union-attr]
            if rng.random() < 0.1:
                numa[1] = None
            store.insert(pod, rng.choice(["main", "init"]), "nvidia.com/gpu", numa, None)
        elif action < 0.7:
            store.delete([pod])
        elif action < 0.8:
            store.set_registered_devices(
                {"nvidia.com/gpu": rng.sample(devices, rng.randint(0, 8))}
                if rng.random() < 0.8
                else {"example.com/fpga": ["fpga-1"]}
            )
        elif action < 0.9:
            with store.transaction():
                store.insert(pod, "main", "intel.com/sriov", {0: [f"0000:3b:{seed:02x}.1"]}, None)
                store.insert(pod, "main", "nvidia.com/gpu", {0: [rng.choice(devices)]}, b"")
        else:
            from podstore import PodDevicesEntry

            store.from_checkpoint_data(
                [PodDevicesEntry(pod, "side", "nvidia.com/gpu", {0: [rng.choice(devices)]}, b"")]
            )
    return store


def rows(url: str, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Rows of a test's own query (on the pooled connection: quicker than ``fleet sql``)."""
    from sqlalchemy import text

    target = resolve(url)

    def run() -> list[tuple[Any, ...]]:
        with db.transaction(target) as conn:
            return [tuple(r) for r in conn.execute(text(sql), params or {})]

    return db.retrying(target, run)


def node_allocations(store: PodStore) -> Counter[tuple[Any, ...]]:
    found = store.query(
        "SELECT pod_uid, container, resource, numa_node, device_id FROM v_allocations"
    ).rows
    return Counter(tuple(r) for r in found)


def fleet_allocations(url: str, store_id: str) -> Counter[tuple[Any, ...]]:
    found = rows(
        url,
        "SELECT pod_uid, container, resource, numa_node, device_id FROM v_fleet_allocations "
        "WHERE store_id = CAST(:s AS uuid)",
        {"s": store_id},
    )
    return Counter(found)


def node_entries(store: PodStore) -> dict[tuple[str, str, str], Any]:
    state = replay_history(store.history())
    return {
        k: None if v is None else {str(n): ids for n, ids in v.items()}
        for k, v in state.entries.items()
    }


def fleet_entries(url: str, store_id: str) -> dict[tuple[str, str, str], Any]:
    found = rows(
        url,
        "SELECT pod_uid, container, resource, device_ids FROM fleet_entries "
        "WHERE store_id = CAST(:s AS uuid)",
        {"s": store_id},
    )
    return {(r[0], r[1], r[2]): r[3] for r in found}


def fleet_registered(url: str, store_id: str) -> dict[str, Any]:
    found = rows(
        url,
        "SELECT resource, device_ids FROM fleet_registered WHERE store_id = CAST(:s AS uuid)",
        {"s": store_id},
    )
    return {r[0]: r[1] for r in found}


def fleet_event_seqs(url: str, store_id: str) -> list[int]:
    found = rows(
        url,
        "SELECT seq FROM fleet_events WHERE store_id = CAST(:s AS uuid) ORDER BY seq",
        {"s": store_id},
    )
    return [int(r[0]) for r in found]


def fleet_last_seq(url: str, store_id: str) -> int:
    found = rows(
        url, "SELECT last_seq FROM fleet_stores WHERE store_id = CAST(:s AS uuid)", {"s": store_id}
    )
    return int(found[0][0]) if found else 0


def assert_same_state(url: str, store: PodStore) -> None:
    """The store's central current state equals the node's."""
    sid = store.store_id
    assert fleet_allocations(url, sid) == node_allocations(store)
    assert fleet_entries(url, sid) == node_entries(store)
    assert fleet_registered(url, sid) == replay_history(store.history()).registered
    doubles = rows(
        url,
        "SELECT resource, device_id, pod_uid, container, pod_count "
        "FROM v_fleet_double_allocations WHERE store_id = CAST(:s AS uuid)",
        {"s": sid},
    )
    node_doubles = store.query(
        "SELECT resource, device_id, pod_uid, container, pod_count FROM v_double_allocations"
    ).rows
    assert sorted(doubles) == sorted(tuple(r) for r in node_doubles)


def node_events(store: PodStore) -> list[tuple[Any, ...]]:
    """(seq, op, pod, container, resource, device_ids as JSON value) of every node event."""
    out = []
    for e in store.history():
        ids: Any = e.device_ids
        if isinstance(ids, dict):
            ids = {str(k): v for k, v in ids.items()}
        out.append((e.seq, e.op, e.pod_uid, e.container_name, e.resource_name, ids))
    return out


def fleet_events(url: str, store_id: str) -> list[tuple[Any, ...]]:
    found = rows(
        url,
        "SELECT seq, op, pod_uid, container, resource, device_ids FROM fleet_events "
        "WHERE store_id = CAST(:s AS uuid) ORDER BY seq",
        {"s": store_id},
    )
    return [(int(r[0]), *r[1:]) for r in found]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# ---- the server side without a node: chained events made here, sent to the functions ----------


def as_role(url: str, role: str) -> str:
    """The test server's URL of the same database, logging in as ``role`` (trust auth)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def connect(url: str) -> Any:
    """A psycopg connection of its own (libpq form of the URL), autocommit off."""
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))


def chained(
    store_id: str,
    rows: list[tuple[Any, ...]],
    prev: bytes | None = None,
) -> tuple[list[dict[str, Any]], bytes]:
    """Events as the shipping functions take them, hashed with pure/chain.py: ``rows`` are
    (seq, ts, op, pod_uid, container, resource, device_ids, released); the chain starts at
    ``prev`` (default: the store's genesis). Returns the records and the last hash."""
    from podstore.pure import chain

    value = chain.genesis(store_id) if prev is None else prev
    out = []
    for row in rows:
        value = chain.link(value, *row)
        names = ("seq", "ts", "op", "pod_uid", "container", "resource", "device_ids", "released")
        out.append({**dict(zip(names, row, strict=True)), "hash": value.hex()})
    return out, value


def entry_rows(first: int, n: int, pods: int = 5) -> list[tuple[Any, ...]]:
    """``n`` insert/replace/delete events from seq ``first`` over a few pods."""
    out: list[tuple[Any, ...]] = []
    for seq in range(first, first + n):
        pod = f"p{seq % pods}"
        ts = f"2026-12-04T10:{seq // 60 % 60:02d}:{seq % 60:02d}.000000Z"
        if seq % 7 == 0:
            out.append((seq, ts, "delete", pod, "c", "gpu", None, None))
        else:
            ids = json.dumps({"0": [f"G{seq % 9}"], "1": [f"H{seq % 4}"]}, separators=(",", ":"))
            out.append((seq, ts, "insert", pod, "c", "gpu", ids, None))
    return out


def wire(events: list[dict[str, Any]]) -> tuple[str, bytes]:
    """Event records (``chained``) as the shipping functions take them: a JSON array of
    arrays, and the hashes apart (``fleet_events_in``)."""
    names = ("seq", "ts", "op", "pod_uid", "container", "resource", "device_ids", "released")
    fields = [[e[name] for name in names] for e in events]
    return json.dumps(fields), b"".join(bytes.fromhex(e["hash"]) for e in events)


def send_batch(
    conn: Any,
    store_id: str,
    node: str,
    events: list[dict[str, Any]],
    prev: bytes,
    node_high: int | None = None,
) -> tuple[int, str | None]:
    """fleet_ship_open then fleet_ship_batch on ``conn`` (committed); (shipped, refused)."""
    opened = conn.execute("SELECT * FROM fleet_ship_open(%s, %s)", (store_id, node)).fetchone()
    if opened[2] is not None:
        conn.commit()
        return 0, opened[2]
    high = node_high if node_high is not None else (events[-1]["seq"] if events else opened[0])
    row = conn.execute(
        "SELECT * FROM fleet_ship_batch(%s, %s, %s, %s, %s, %s)",
        (store_id, node, high, prev, *wire(events)),
    ).fetchone()
    conn.commit()
    return int(row[0]), row[1]
