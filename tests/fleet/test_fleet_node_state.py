"""The whole node in the fleet (revision f0003): the node's CPU, memory and DRA items, its
topology and pod names ship with its device events and are kept as current state in
``fleet_node_items``, and the fleet views of the whole node equal the node's views store by
store (docs/fleet.md, "The whole node"). Rights: a node role writes them only through the
shipping functions, for its own node; the reader role reads the new views. The migration
rebuilds the state from the events a filled database already holds."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from harness.docblocks import DOCS, reads_the_fleet, sql_blocks
from harness.fleetlib import as_role, assert_same_state, connect, rows
from harness.nodegen import Node

from podstore import PodStore
from podstore.cli import cli
from podstore.fleet import admin, migrate, read
from podstore.fleet.ship import ship
from podstore.storage.node.sync import current_items

NODE = "whole-1"


def _nodes(text: str | None) -> list[int] | None:
    return None if text is None else list(json.loads(text))


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _fleet(url: str, sql: str, store: PodStore) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows(url, sql, {"s": store.store_id})), key=lambda r: repr(r))


def _node(store: PodStore, sql: str, convert: dict[int, Any]) -> list[tuple[Any, ...]]:
    out = []
    for r in store.query(sql).rows:
        out.append(tuple(convert[i](v) if i in convert else v for i, v in enumerate(r)))
    return sorted(out, key=lambda r: repr(r))


def _fleet_items(url: str, store: PodStore) -> dict[tuple[Any, ...], Any]:
    found = rows(
        url,
        "SELECT kind, pod_uid, container, resource, value FROM fleet_node_items "
        "WHERE store_id = CAST(:s AS uuid)",
        {"s": store.store_id},
    )
    return {tuple(r[:4]): r[4] for r in found}


def _node_items(store: PodStore) -> dict[tuple[Any, ...], Any]:
    with store.reader() as reader:
        items = reader.node_items()
    return {tuple(r[:4]): _json(r[4]) for r in items}


NUMA_COLUMNS = (
    "pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, aligned"
)


def assert_same_node(url: str, store: PodStore) -> None:
    """Every fleet view of the whole node equals the node's view (+ node, store_id)."""
    assert_same_state(url, store)
    assert _fleet_items(url, store) == _node_items(store)
    where = "WHERE store_id = CAST(:s AS uuid)"
    for fleet_view, node_view in (
        ("v_fleet_container_numa", "v_container_numa"),
        ("v_fleet_numa_misaligned", "v_numa_misaligned"),
    ):
        mine = _fleet(url, f"SELECT {NUMA_COLUMNS} FROM {fleet_view} {where}", store)
        theirs = _node(
            store, f"SELECT {NUMA_COLUMNS} FROM {node_view}", {4: _nodes, 5: _nodes, 6: _nodes}
        )
        assert mine == theirs, fleet_view
    dra = (
        "claim_uid, namespace, claim_name, pod_uid, driver, pool, device, share_id, "
        "request_names, cdi_device_ids"
    )
    assert _fleet(url, f"SELECT {dra} FROM v_fleet_dra_devices {where}", store) == _node(
        store, f"SELECT {dra} FROM v_dra_devices", {8: _json, 9: _json}
    )
    names = "pod_uid, namespace, name"
    assert _fleet(url, f"SELECT {names} FROM v_fleet_pod_names {where}", store) == _node(
        store, f"SELECT {names} FROM v_pod_names", {}
    )
    owners = "resource, device_id, pod_uid, container, namespace, pod_name"
    assert _fleet(url, f"SELECT {owners} FROM v_fleet_device_owners {where}", store) == _node(
        store,
        "SELECT o.resource, o.device_id, o.pod_uid, o.container, n.namespace, n.name "
        "FROM v_device_owners o LEFT JOIN v_pod_names n ON n.pod_uid = o.pod_uid",
        {},
    )


def _whole_node(tmp_path: Path, pods: int, name: str, **kw: Any) -> tuple[Path, Path, Path]:
    return Node(pods, cpus_per_node=12, **kw).write_all(tmp_path / name)


def _load(store: PodStore, tree: tuple[Path, Path, Path]) -> None:
    store.import_node(tree[0], sysfs=tree[1], pod_logs=tree[2])


def _a_dra_device(store: PodStore) -> str:
    found = store.query("SELECT driver, pool, device FROM v_dra_devices ORDER BY 1, 2, 3").rows
    assert found
    return "/".join(found[0])


def _fleet_owners(url: str, device: str, at: str | None = None) -> list[tuple[Any, ...]]:
    return sorted((r[2], r[4], r[7]) for r in read.owners(url, device, at=at).rows if r[0] == NODE)


def _node_owners(store: PodStore, device: str, at: str | None = None) -> list[tuple[Any, ...]]:
    found = store.dra_owners(device) if at is None else store.dra_owners_at(device, at)
    driver = device.split("/", 1)[0]
    return sorted((o.pod_uid, driver, f"{o.namespace}/{o.claim_name}") for o in found)


def test_the_whole_node_ships_and_the_fleet_views_equal_the_nodes(
    tmp_path: Path, fleet_url: str
) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        kinds = {e.op.split("-")[0] for e in store.history() if "-" in e.op}
        assert {"cpu", "memory", "dra", "node"} <= kinds
        assert store.query("SELECT count(*) FROM v_allocations").rows[0][0] > 0
        ship(store, fleet_url, node=NODE)
        assert_same_node(fleet_url, store)
        # Every view compared holds rows (the node's fixture meets in the joins).
        for view in (
            "v_fleet_container_numa",
            "v_fleet_dra_devices",
            "v_fleet_pod_names",
            "v_fleet_device_owners WHERE pod_name IS NOT NULL",
            "v_fleet_container_numa WHERE aligned = 1 AND cpu_numa IS NOT NULL "
            "AND memory_numa IS NOT NULL AND device_numa IS NOT NULL",
        ):
            assert rows(fleet_url, f"SELECT count(*) FROM {view}")[0][0] > 0, view
        misaligned = rows(fleet_url, "SELECT pod_uid, container FROM v_fleet_numa_misaligned")
        assert misaligned  # the misaligned pod, found fleet-wide
        assert {r[0] for r in misaligned} <= {
            r[0] for r in store.query("SELECT pod_uid FROM v_numa_misaligned").rows
        }

        # A change: exactly its events ship, and the state follows.
        seqs = [e.seq for e in store.history()]
        _load(store, _whole_node(tmp_path, 6, "second"))
        new = [e.seq for e in store.history() if e.seq > seqs[-1]]
        assert new
        again = ship(store, fleet_url, node=NODE)
        assert (again.shipped, again.last_seq) == (len(new), new[-1])
        assert_same_node(fleet_url, store)
        assert ship(store, fleet_url, node=NODE).shipped == 0
        # Each item carries the seq of its latest event, on the node as in the fleet.
        latest = {
            (e.pod_uid, e.container_name, e.resource_name): e.seq
            for e in store.history()
            if e.op.endswith("-set")
        }
        for key, seq in rows(
            fleet_url,
            "SELECT jsonb_build_array(pod_uid, container, resource), seq FROM fleet_node_items "
            "WHERE store_id = CAST(:s AS uuid)",
            {"s": store.store_id},
        ):
            assert latest[tuple(key)] == seq, key
        (checked,) = read.verify(fleet_url).dicts()
        assert (checked["chained"], checked["problem"]) == (new[-1], None)

        # Two changes of the same items in one batch: each item takes its last event's state.
        _load(store, _whole_node(tmp_path, 3, "third", misaligned={2}))
        _load(store, _whole_node(tmp_path, 5, "fourth", misaligned={0}))
        assert ship(store, fleet_url, node=NODE).batches == 1
        assert_same_node(fleet_url, store)


def test_fleet_owners_finds_a_dra_device_now_and_at_an_instant(
    tmp_path: Path, fleet_url: str
) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first"))
        device = _a_dra_device(store)
        ship(store, fleet_url, node=NODE)
        held = _fleet_owners(fleet_url, device)
        assert held and held == _node_owners(store, device)
        # The pod's name comes along, as v_fleet_device_owners has it.
        (first,) = [r for r in read.owners(fleet_url, device).rows if r[2] == held[0][0]][:1]
        assert (first[5], first[6]) == tuple(
            store.query(
                "SELECT namespace, name FROM v_pod_names WHERE pod_uid = ?", (held[0][0],)
            ).rows[0]
        )
        result = CliRunner().invoke(
            cli, ["fleet", "owners", device, "--url", fleet_url, "-o", "json"]
        )
        assert result.exit_code == 0, result.output
        assert {r["claim"] for r in json.loads(result.output)} == {h[2] for h in held}

        # Release the claims naming it; then --at before and after the release.
        state = store.dra_state()
        assert state is not None and state.claims
        kept = [
            c
            for c in state.claims
            if not any(
                f"{d}/{x.pool_name}/{x.device_name}" == device
                for d, devs in (c.driver_state or {}).items()
                for x in devs or ()
            )
        ]
        time.sleep(0.01)
        store.set_dra_state(dataclasses.replace(state, claims=kept))
        ship(store, fleet_url, node=NODE)
        released_at = [e for e in store.history() if e.op == "dra-delete"][-1].timestamp
        assert _fleet_owners(fleet_url, device) == [] == _node_owners(store, device)
        at = released_at.isoformat()
        assert _fleet_owners(fleet_url, device, at) == [] == _node_owners(store, device, at)
        before_release = [e for e in store.history() if e.timestamp < released_at][-1].timestamp
        at = before_release.isoformat()
        assert _fleet_owners(fleet_url, device, at) == _node_owners(store, device, at) == held
        assert_same_node(fleet_url, store)


def test_a_gap_heals_with_the_nodes_items(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        # Pruned before its first ship: each load replaces the whole node, so a store the
        # fleet already held would have pruned the first event the fleet lacks, and such a
        # snapshot is refused (revision f0005, test_fleet_hostile_node.py); one never shipped
        # has no chain to continue.
        _load(store, _whole_node(tmp_path, 6, "second"))
        _load(store, _whole_node(tmp_path, 3, "third", misaligned={2}))
        time.sleep(0.01)
        store.prune_history(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 1)) + "Z")
        report = ship(store, fleet_url, node=NODE)
        assert report.snapshots == 1
        assert_same_node(fleet_url, store)
        (checked,) = read.verify(fleet_url).dicts()
        assert checked["problem"] is None


def test_a_node_role_ships_the_whole_node_and_writes_nothing_else(
    tmp_path: Path, fleet_url: str
) -> None:
    role = admin.grant_node(fleet_url, NODE).role
    node_url = as_role(fleet_url, role)
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first"))
        ship(store, node_url, node=NODE)
        assert_same_node(fleet_url, store)
    other = str(uuid.uuid4())
    refused: list[str] = []
    for statement in (
        "INSERT INTO fleet_node_items (store_id, item_key, kind, resource, seq) "
        f"VALUES ('{other}', 'k', 'cpu', 'cpu', 1)",
        "UPDATE fleet_node_items SET value = NULL",
        "DELETE FROM fleet_node_items",
        "SELECT * FROM fleet_node_items",
        "SELECT * FROM v_fleet_container_numa",
        "SELECT fleet_ship_batch(gen_random_uuid(), 'another-node', 1, "
        "decode(repeat('00', 32), 'hex'), "
        '\'[[1, "2026-01-01T00:00:00Z", "cpu-set", "p", "c", "cpu", "[1]", null]]\', '
        "decode(repeat('00', 32), 'hex'))",
    ):
        with connect(node_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            conn.execute(statement)
        refused.append(str(e.value))
    assert all("permission denied" in r for r in refused), refused
    assert "may not ship for node another-node" in refused[-1]
    # Nobody reaches the shipping functions through PUBLIC; the node role reaches the entry
    # points, the reader none.
    admin.grant_reader(fleet_url, "whole_reader")
    query = "SELECT has_function_privilege(:role, CAST(:fn AS regprocedure), 'EXECUTE')"
    for fn in admin.SHIP_FUNCTIONS:
        assert rows(fleet_url, query, {"role": "whole_reader", "fn": fn}) == [(False,)]
        assert rows(fleet_url, query, {"role": role, "fn": fn}) == [(True,)]
    public = rows(
        fleet_url,
        "SELECT p.oid::regprocedure::text FROM pg_proc p CROSS JOIN LATERAL aclexplode("
        "coalesce(p.proacl, acldefault('f', p.proowner))) a "
        "WHERE p.proname LIKE 'fleet_ship%' AND a.grantee = 0",
    )
    assert public == []


def test_the_reader_role_reads_the_new_views(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        ship(store, fleet_url, node=NODE)
    for view in (
        "v_fleet_container_numa",
        "v_fleet_numa_misaligned",
        "v_fleet_dra_devices",
        "v_fleet_pod_names",
        "v_fleet_device_owners",
        "fleet_node_items",
    ):
        # read.query runs as the reader role (`fleet grant-reader`), read-only.
        assert read.query(fleet_url, f"SELECT count(*) FROM {view}").rows[0][0] > 0, view


def test_a_retired_store_leaves_the_whole_node_views(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        device = _a_dra_device(store)
        ship(store, fleet_url, node=NODE)
        last = max(e.timestamp for e in store.history()).isoformat()
    views = (
        "v_fleet_container_numa",
        "v_fleet_numa_misaligned",
        "v_fleet_dra_devices",
        "v_fleet_pod_names",
        "v_fleet_device_owners",
    )
    assert all(rows(fleet_url, f"SELECT count(*) FROM {v}")[0][0] > 0 for v in views)
    assert read.owners(fleet_url, device).rows
    admin.retire(fleet_url, node=NODE)
    for view in views:
        assert rows(fleet_url, f"SELECT count(*) FROM {view}") == [(0,)], view
    assert read.owners(fleet_url, device).rows == []
    # Its history stays: at an instant before the retirement the claim was there.
    assert read.owners(fleet_url, device, at=last).rows


def test_f0003_on_a_filled_database_rebuilds_the_node_state_and_downgrades(
    tmp_path: Path, fleet_url: str
) -> None:
    role = admin.grant_node(fleet_url, NODE).role
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        ship(store, fleet_url, node=NODE)
        _load(store, _whole_node(tmp_path, 6, "second"))
        ship(store, fleet_url, node=NODE)
        items = _fleet_items(fleet_url, store)

        down = migrate.downgrade(fleet_url, "f0002")
        assert (down.before, down.after) == (migrate.HEAD_REVISION, "f0002")
        assert rows(fleet_url, "SELECT to_regclass('fleet_node_items') IS NULL") == [(True,)]
        assert rows(
            fleet_url, "SELECT count(*) FROM pg_proc WHERE proname = 'fleet_dra_devices'"
        ) == [(0,)]
        assert rows(
            fleet_url,
            "SELECT count(*) FROM fleet_events WHERE cardinality(devices) > 0 AND op LIKE 'dra-%'",
        ) == [(0,)]
        f0002_snapshot = (
            "fleet_ship_snapshot(uuid, text, bigint, timestamptz, bytea, json, json, jsonb, "
            "bytea, json)"
        )
        query = "SELECT has_function_privilege(:role, CAST(:fn AS regprocedure), 'EXECUTE')"
        assert rows(fleet_url, query, {"role": role, "fn": f0002_snapshot}) == [(True,)]
        assert rows(fleet_url, query, {"role": "podstore_reader", "fn": f0002_snapshot}) == [
            (False,)
        ]

        up = migrate.upgrade(fleet_url)
        assert (up.before, up.after) == ("f0002", migrate.HEAD_REVISION)
        assert _fleet_items(fleet_url, store) == items
        assert_same_node(fleet_url, store)
        for fn in admin.SHIP_FUNCTIONS:
            assert rows(fleet_url, query, {"role": role, "fn": fn}) == [(True,)]
        # The reader granted before the upgrade reads the re-created and the new views.
        for view in ("v_fleet_device_owners", "v_fleet_container_numa", "fleet_node_items"):
            assert read.query(fleet_url, f"SELECT count(*) FROM {view}").rows[0][0] > 0
        (checked,) = read.verify(fleet_url).dicts()
        assert checked["problem"] is None
        # Shipping goes on as the node's role.
        _load(store, _whole_node(tmp_path, 3, "third"))
        assert ship(store, as_role(fleet_url, role), node=NODE).shipped > 0
        assert_same_node(fleet_url, store)


def test_f0004_computes_alignment_store_by_store_with_f0003s_rows_and_readers(
    tmp_path: Path, fleet_url: str
) -> None:
    """f0004 replaces f0003's v_fleet_container_numa (the whole fleet grouped, then joined to
    the stores) with a LATERAL subquery per store: the same rows for nodes aligned, misaligned
    and mixed, before the downgrade, after it and after the upgrade again, each read as the
    reader role (its SELECT kept through both re-creations)."""
    stores = []
    try:
        for i, (pods, misaligned) in enumerate(((4, {1}), (5, set()), (3, {0, 2}))):
            store = PodStore.open(tmp_path / f"n{i}.db")
            stores.append(store)
            _load(store, _whole_node(tmp_path, pods, f"t{i}", misaligned=misaligned))
            ship(store, fleet_url, node=f"numa-{i}")

        def answers() -> tuple[list[tuple[Any, ...]], ...]:
            return tuple(
                sorted(
                    (tuple(r) for r in read.query(fleet_url, f"SELECT * FROM {v}").rows), key=repr
                )
                for v in ("v_fleet_container_numa", "v_fleet_numa_misaligned")
            )

        def definition() -> str:
            (found,) = rows(fleet_url, "SELECT pg_get_viewdef('v_fleet_container_numa')")
            return str(found[0])

        head, head_text = answers(), definition()
        assert len(head[0]) == 12 and {r[2] for r in head[1]} == {
            r[2] for r in head[0] if r[-1] == 0
        }
        assert len({r[0] for r in head[1]}) == 2  # two nodes have misaligned containers
        for store in stores:
            assert_same_node(fleet_url, store)

        down = migrate.downgrade(fleet_url, "f0003")
        assert (down.before, down.after) == (migrate.HEAD_REVISION, "f0003")
        assert definition() != head_text
        assert answers() == head
        assert migrate.upgrade(fleet_url).after == migrate.HEAD_REVISION
        assert definition() == head_text
        assert answers() == head
    finally:
        for store in stores:
            store.close()


def test_current_items_read_back_what_the_history_says(tmp_path: Path) -> None:
    """The snapshot's items are the payloads of each item's latest event."""
    from podstore.storage.node.codec import replay

    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first"))
        _load(store, _whole_node(tmp_path, 5, "second", misaligned={0}))
        with store.reader() as reader:
            mine = {tuple(r[1:4]): r[4] for r in reader.node_items()}
        assert mine == replay(store.history())
        with store.reader() as reader:
            assert reader.node_items() == reader._call(current_items)


def test_the_documented_fleet_queries_answer_on_the_fleet(tmp_path: Path, fleet_url: str) -> None:
    """docs/sql.md's queries over the fleet's views (tests/test_audit_docs.py runs the node's):
    each runs through ``fleet sql`` (the reader role, read-only) and gives the rows the node's
    own views say."""
    # The physical views' queries run in tests/fleet/test_fleet_physical.py, on a node that has
    # physical devices.
    blocks = {
        h: sql
        for h, sql in sql_blocks(DOCS / "sql.md")
        if reads_the_fleet(sql) and "physical" not in h
    }
    with PodStore.open(tmp_path / "n.db") as store:
        _load(store, _whole_node(tmp_path, 4, "first", misaligned={1}))
        ship(store, fleet_url, node=NODE)
        misaligned = sorted(
            (NODE, *r[:3], *(_nodes(v) for v in r[3:]))
            for r in store.query(
                "SELECT namespace, pod_name, container, device_numa, cpu_numa, memory_numa "
                "FROM v_numa_misaligned"
            ).rows
        )
        namespaces = sorted(
            {r[0] for r in store.query("SELECT namespace FROM v_allocation_intervals").rows},
            key=str,
        )
    assert misaligned and namespaces
    expected = {
        "`v_fleet_container_numa` — per container, the NUMA nodes of its devices, CPUs and "
        "memory": misaligned,
    }
    usage = (
        "`v_fleet_allocation_intervals` — the node's intervals, store by store (fleet "
        "revisions f0007, f0009)"
    )
    assert set(blocks) == set(expected) | {usage}
    # The kept rows the usage block sums are caught up first, as its text says; its hours
    # grow with the clock: each namespace the node's intervals name, with some.
    assert read.catch_up(fleet_url) > 0
    hours = rows(fleet_url, blocks.pop(usage))
    assert sorted((r[0] for r in hours), key=str) == namespaces
    assert all(r[1] > 0 for r in hours)
    for heading, sql in blocks.items():
        assert [tuple(r) for r in rows(fleet_url, sql)] == expected[heading], heading
        run = CliRunner().invoke(cli, ["fleet", "sql", "--url", fleet_url, "-o", "csv", "--", sql])
        assert run.exit_code == 0, run.output
        assert len(run.output.strip().splitlines()) == 1 + len(expected[heading])
