"""Physical devices in the fleet (revision f0008): a node's CDI devices and entry responses ship
as current state beside its events, and the fleet's twins of the node's physical views — and
the identity its intervals take — equal the node's row for row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from harness.docblocks import DOCS, reads_the_fleet, sql_blocks
from harness.fleetlib import as_role, connect, rows
from harness.physical import GPU, PhysicalNode, claim, entry, pod, response

from podstore import PodStore
from podstore.checkpoint import PodName
from podstore.cli import cli
from podstore.fleet import admin, migrate
from podstore.fleet.ship import ship

SHARED = "nvidia.com/gpu.shared"
FLEET_RELATIONS = (
    "fleet_cdi_device_nodes",
    "fleet_response_nodes",
    "v_fleet_device_identity",
    "v_fleet_physical_devices",
    "v_fleet_physical_double_allocations",
)
CARD = "example.com/card"

# The node's views and their twins, with the node view's columns in order.
TWINS = {
    "v_device_identity": "mechanism, resource, device, physical_id, resolved, share",
    "v_physical_devices": "physical_id, resolved, mechanism, resource, device, pod_uid, "
    "namespace, pod_name, container, share",
    "v_physical_double_allocations": "physical_id, mechanism, resource, device, pod_uid, "
    "namespace, pod_name, container, pod_count",
}

# One node with every case of tests/test_physical_devices.py: one card through the device plugin
# (by a response's CDI name, by a host path) and DRA; a MIG partition beside its whole GPU and
# two partitions of one GPU; unresolved devices held twice; replicas beside a whole card of DRA
# and replicas shared as declared; DRA shares, admin access, one claim of two pods, a claim no
# pod uses yet.
EVERY_CASE = PhysicalNode(
    entries=[
        entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",))),
        entry("c", ["card-1"], response(host_paths=("/dev/nvidia1",)), resource=CARD),
        # Overlaps claim d's card without either holding the other: not one card with d.
        entry("q", ["card-19"], response(host_paths=("/dev/nvidia1", "/dev/nvidia9")), CARD),
        entry("k", ["MIG-5-1"], response(cdi=(f"{GPU}=MIG-5-1",))),
        entry("m", ["MIG-6-0"], response(cdi=(f"{GPU}=MIG-6-0",))),
        entry("n", ["MIG-6-1"], response(cdi=(f"{GPU}=MIG-6-1",))),
        entry("u", ["X-1"]),
        entry("v", ["X-1"]),
        entry("w", ["X-2::1"]),
        entry("e", ["GPU-2::0"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
        entry("f", ["GPU-2::1"], response(cdi=(f"{GPU}=GPU-2",)), resource=SHARED),
    ],
    registered={
        GPU: ["GPU-0", "MIG-5-1", "MIG-6-0", "MIG-6-1", "X-1"],
        CARD: ["card-1"],
        # The base registered beside its replicas is not one of them.
        SHARED: ["GPU-2", *(f"GPU-2::{i}" for i in range(4))],
    },
    claims=[
        claim("b", ["b"], "gpu-0", [f"{GPU}=GPU-0"]),
        claim("d", ["d"], "gpu-1", [f"{GPU}=GPU-1"]),
        claim("l", ["l"], "gpu-5", [f"{GPU}=GPU-5"]),
        claim("p", ["p"], "gpu-2", [f"{GPU}=GPU-2"]),
        claim("g", ["g"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s1"),
        claim("h", ["h"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s2"),
        claim("r", ["r"], "gpu-3", [f"{GPU}=GPU-3"], share_id="s3"),
        claim("i", ["i"], "gpu-4", [f"{GPU}=GPU-4"]),
        claim("j", ["j"], "gpu-4", [f"{GPU}=GPU-4"]),
        claim("s", ["s", "t"], "gpu-8", [f"{GPU}=GPU-8"]),
        claim("y", [], "gpu-7", [f"{GPU}=GPU-7"]),
    ],
    cards=10,
)


def load(store: PodStore, root: Path, node: PhysicalNode) -> None:
    kubelet, cdi = node.write(root)
    # Names for some pods of each mechanism: the views take them as the node's do.
    store.set_pod_names({pod(x): PodName(f"team-{x}", f"pod-{x}") for x in "abcgs"})
    store.import_node(kubelet, sysfs=root / "no-sys", pod_logs=root / "no-logs", cdi_dirs=[cdi])


def node_rows(store: PodStore, view: str) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r) for r in store.query(f"SELECT {TWINS[view]} FROM {view}").rows), key=repr
    )


def fleet_rows(url: str, view: str, store_id: str) -> list[tuple[Any, ...]]:
    twin = view.replace("v_", "v_fleet_", 1)
    found = rows(
        url,
        f"SELECT node, store_id, {TWINS[view]} FROM {twin} WHERE store_id = CAST(:s AS uuid)",
        {"s": store_id},
    )
    assert {(r[0], str(r[1])) for r in found} <= {("node-1", store_id)}
    return sorted((r[2:] for r in found), key=repr)


def intervals_node(store: PodStore) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(r)
        for r in store.query(
            "SELECT mechanism, resource, device, pod_uid, physical_id, share "
            "FROM v_allocation_intervals"
        ).rows
    )


def intervals_fleet(url: str, store_id: str) -> list[tuple[Any, ...]]:
    return sorted(
        rows(
            url,
            "SELECT mechanism, resource, device, pod_uid, physical_id, share "
            "FROM v_fleet_allocation_intervals WHERE store_id = CAST(:s AS uuid)",
            {"s": store_id},
        )
    )


def assert_twins(url: str, store: PodStore) -> None:
    for view in TWINS:
        assert fleet_rows(url, view, store.store_id) == node_rows(store, view), view
    # The share rule changed on the fleet first (revision f0009: fixed when the holding
    # starts, DRA holdings whole); the node's own revision follows, so shares are compared
    # with the rule by the tests, the rest with the node.
    assert [r[:5] for r in intervals_fleet(url, store.store_id)] == [
        r[:5] for r in intervals_node(store)
    ]


def test_the_fleets_physical_views_equal_the_nodes(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        ship(store, fleet_url, node="node-1")
        doubles = node_rows(store, "v_physical_double_allocations")
        # The node finds the cases its own tests find: nothing here is vacuous.
        assert {(r[1], r[3]) for r in doubles} == {
            ("device-plugin", "GPU-0"), ("dra", "pool/gpu-0"), ("device-plugin", "card-1"),
            ("dra", "pool/gpu-1"), ("device-plugin", "card-19"), ("device-plugin", "MIG-5-1"),
            ("dra", "pool/gpu-5"),
            ("device-plugin", "X-1"), ("device-plugin", "GPU-2::0"),
            ("device-plugin", "GPU-2::1"), ("dra", "pool/gpu-2"),
        }  # fmt: skip
        assert_twins(fleet_url, store)
        resolved = {r[4]: r[0] for r in node_rows(store, "v_physical_devices") if r[1]}
        mig = json.loads(resolved["MIG-5-1"])  # in byte order, as SQLite sorts
        assert mig == sorted(mig) and mig[0].startswith("/dev/nvidia-caps/") and len(mig) == 4
        # A replica's fraction reaches the fleet's intervals (the registration in force when
        # the holding began); a DRA holding counts whole, its split being the current one.
        shares = {(r[2], r[3][:1]): r[5] for r in intervals_fleet(fleet_url, store.store_id)}
        assert shares["GPU-2::0", "e"] == 0.25 and shares["pool/gpu-8", "s"] == 1.0
        assert shares["pool/gpu-3", "g"] == 1.0


def test_a_dra_share_counts_whole_open_or_finished(tmp_path: Path, fleet_url: str) -> None:
    three = [claim(x, [x], "gpu-3", [f"{GPU}=GPU-3"], share_id=f"s-{x}") for x in "ghr"]
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, PhysicalNode(claims=three))
        ship(store, fleet_url, node="node-1")
        assert_twins(fleet_url, store)
        load(store, tmp_path, PhysicalNode(claims=three[:2]))  # claim r unprepared
        ship(store, fleet_url, node="node-1")
        assert_twins(fleet_url, store)
        shares = {r[3][:1]: r[5] for r in intervals_fleet(fleet_url, store.store_id)}
    # Open or ended, a DRA holding counts whole: kubelet's file keeps no record of the
    # capacity a share consumed, and the split among holders now is no holding's own.
    assert shares == {"g": 1.0, "h": 1.0, "r": 1.0}
    # (v_fleet_physical_devices keeps the split now: g and h share the card.)
    now = {r[5][:1]: r[9] for r in fleet_rows(fleet_url, "v_physical_devices", store.store_id)}
    assert now == {"g": 0.5, "h": 0.5}


def test_cdi_devices_removed_on_the_node_go_from_the_fleet(tmp_path: Path, fleet_url: str) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        ship(store, fleet_url, node="node-1")
        count = "SELECT count(*) FROM fleet_cdi_device_nodes WHERE store_id = CAST(:s AS uuid)"
        assert rows(fleet_url, count, {"s": store.store_id})[0][0] > 0
        (tmp_path / "cdi" / "nvidia.json").unlink()  # the directory is there, and empty
        report = store.import_node(
            tmp_path / "kubelet", sysfs=tmp_path / "x", pod_logs=tmp_path / "y",
            cdi_dirs=[tmp_path / "cdi"],
        )  # fmt: skip
        assert report.cdi is not None and report.cdi.removed == 1
        # No event: the facts ship anyway, as current state.
        assert ship(store, fleet_url, node="node-1").shipped == 0
        assert rows(fleet_url, count, {"s": store.store_id}) == [(0,)]
        assert_twins(fleet_url, store)
        # Only host paths resolve now: card 1, and the CDI names name no nodes.
        held = {r[4]: r[1] for r in fleet_rows(fleet_url, "v_physical_devices", store.store_id)}
        assert held["card-1"] == 1 and held["GPU-0"] == 0


def read_as_reader(url: str, relations: list[str]) -> None:
    """Each relation read as the reader role (its privileges, not the superuser's)."""
    with connect(url) as conn:
        conn.execute("SET ROLE podstore_reader")
        for relation in relations:
            conn.execute(f"SELECT count(*) FROM {relation}").fetchone()


def _physical(url: str, store_id: str, node: str, cdi: list[dict[str, str]]) -> Any:
    with connect(url) as conn:
        found = conn.execute(
            "SELECT changed, refused FROM fleet_ship_physical(%s, %s, %s, %s)",
            (store_id, node, json.dumps(cdi), "[]"),
        ).fetchone()
        conn.commit()
        return found


def test_a_node_role_writes_only_its_own_stores_facts(tmp_path: Path, fleet_url: str) -> None:
    one = admin.grant_node(fleet_url, "node-1").role
    two = admin.grant_node(fleet_url, "node-2").role
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        # A node role ships its store's facts with `fleet grant-node`'s rights alone.
        ship(store, as_role(fleet_url, one), node="node-1")
        assert_twins(fleet_url, store)
        sid = store.store_id
    facts = "SELECT spec_path, name, host_path FROM fleet_cdi_device_nodes ORDER BY 1, 2, 3"
    before = rows(fleet_url, facts)
    evil = [{"spec_path": "/x.json", "name": f"{GPU}=GPU-0", "host_path": "/dev/evil"}]
    # node-2's role naming node-1: the server refuses the role outright.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not ship for node"):
        _physical(as_role(fleet_url, two), sid, "node-1", evil)
    # Its own name on node-1's store: refused as another node's, nothing written.
    changed, refused = _physical(as_role(fleet_url, two), sid, "node-2", evil)
    assert changed == 0 and "belongs to another node, node-1" in refused
    # The tables themselves: neither written nor read by a node role.
    for sql in (
        "INSERT INTO fleet_cdi_device_nodes VALUES (%s, 'p', 'n', '/dev/evil')",
        "INSERT INTO fleet_response_nodes VALUES (%s, 'p', 'c', 'r', 'host', '/dev/evil')",
        "DELETE FROM fleet_cdi_device_nodes WHERE store_id = %s",
    ):
        with (
            connect(as_role(fleet_url, two)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(sql, (sid,))
    assert rows(fleet_url, facts) == before
    # A retired store takes no facts either.
    admin.retire(fleet_url, store_id=sid)
    changed, refused = _physical(as_role(fleet_url, one), sid, "node-1", evil)
    assert changed == 0 and "was retired" in refused
    assert rows(fleet_url, facts) == before
    # The reader reads the new relations.
    read_as_reader(fleet_url, [*FLEET_RELATIONS])


def test_f0008_downgrades_and_upgrades_a_fleet_with_data(tmp_path: Path, fleet_url: str) -> None:
    node_role = admin.grant_node(fleet_url, "node-1").role
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        ship(store, fleet_url, node="node-1")
        assert migrate.downgrade(fleet_url, "f0007").after == "f0007"
        tables = (
            "SELECT to_regclass('fleet_cdi_device_nodes'), to_regclass('v_fleet_device_identity')"
        )
        assert rows(fleet_url, tables) == [(None, None)]
        # f0007's intervals: the unresolved identity, whole.
        back = intervals_fleet(fleet_url, store.store_id)
        assert back and all(r[4] == f"{r[0]}:{r[1]}:{r[2]}" and r[5] == 1 for r in back)
        assert migrate.init(fleet_url).after == migrate.HEAD_REVISION
        # The facts come back with the next ship (no new event), by the node role as granted
        # before the downgrade; the reader reads the views again.
        migrate.forget_all()
        ship(store, as_role(fleet_url, node_role), node="node-1")
        assert_twins(fleet_url, store)
        read_as_reader(fleet_url, [*FLEET_RELATIONS, "v_fleet_allocation_intervals"])


def test_the_same_facts_rewrite_nothing_other_facts_replace_them_whole(
    tmp_path: Path, fleet_url: str
) -> None:
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        ship(store, fleet_url, node="node-1")
        sid = store.store_id
        held = rows(
            fleet_url,
            "SELECT spec_path, name, host_path FROM fleet_cdi_device_nodes "
            "WHERE store_id = CAST(:s AS uuid)",
            {"s": sid},
        )
        cdi = [dict(zip(("spec_path", "name", "host_path"), r, strict=True)) for r in held]
        responses = rows(
            fleet_url,
            "SELECT pod_uid, container, resource, kind, value FROM fleet_response_nodes "
            "WHERE store_id = CAST(:s AS uuid)",
            {"s": sid},
        )
        assert responses
        with connect(fleet_url) as conn:
            same = conn.execute(
                "SELECT changed, refused FROM fleet_ship_physical(%s, 'node-1', %s, %s)",
                (sid, json.dumps(cdi), json.dumps([
                    dict(zip(("pod_uid", "container", "resource", "kind", "value"), r,
                             strict=True)) for r in responses])),
            ).fetchone()  # fmt: skip
        assert same == (0, None)
        # A subset is not the same: the store's rows become exactly what was sent.
        assert _physical(fleet_url, sid, "node-1", cdi[:1]) == (2, None)
        assert [tuple(r) for r in rows(
            fleet_url,
            "SELECT spec_path, name, host_path FROM fleet_cdi_device_nodes "
            "WHERE store_id = CAST(:s AS uuid)",
            {"s": sid},
        )] == [tuple(cdi[0].values())]  # fmt: skip
        ship(store, fleet_url, node="node-1")
        assert_twins(fleet_url, store)


def test_the_documented_physical_query_answers_on_the_fleet(tmp_path: Path, fleet_url: str) -> None:
    """docs/sql.md's query over the fleet's physical views, through ``fleet sql`` (the reader
    role), gives the rows the node's own view says."""
    (sql,) = [s for h, s in sql_blocks(DOCS / "sql.md") if reads_the_fleet(s) and "physical" in h]
    with PodStore.open(tmp_path / "n.db") as store:
        load(store, tmp_path, EVERY_CASE)
        ship(store, fleet_url, node="node-1")
        mine = store.query(
            "SELECT physical_id, mechanism, resource, device, namespace, pod_name, pod_count "
            "FROM v_physical_double_allocations"
        ).rows
    expected = sorted((("node-1", *r) for r in mine), key=repr)
    assert len(expected) == 12  # X-1 twice: its two holders
    assert sorted((tuple(r) for r in rows(fleet_url, sql)), key=repr) == expected
    run = CliRunner().invoke(cli, ["fleet", "sql", "--url", fleet_url, "-o", "csv", "--", sql])
    assert run.exit_code == 0, run.output
    assert len(run.output.strip().splitlines()) == 1 + len(expected)
