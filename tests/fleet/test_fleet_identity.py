"""One identity per store: a store_id belongs to the node that first shipped it. The issue's
defects reproduced — a copied store file, an edited store_id, a flip-flopping --node — each
refused with a message that says which and counted; renaming and retiring are explicit."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness.fleetlib import (
    assert_same_state,
    busy_node,
    fleet_events,
    fleet_last_seq,
    node_events,
    rows,
)

from podstore import FleetRefusedError, PodStore
from podstore.cli import cli
from podstore.fleet import admin, read
from podstore.fleet.ship import ship

PODSTORE = [sys.executable, "-c", "from podstore.cli import main; main()"]


def _ship_cli(db: Path, url: str, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODSTORE, "--db", str(db), "ship", "--to", url, "--node", node],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _nodes(url: str) -> dict[str, dict[str, object]]:
    return {f"{r['node']}/{r['store_id']}": r for r in read.nodes(url).dicts()}


def test_a_copied_store_file_shipped_as_another_node_is_refused(
    tmp_path: Path, fleet_url: str
) -> None:
    a_db, c_db = tmp_path / "node-a.db", tmp_path / "node-c.db"
    with busy_node(a_db, seed=1) as a:
        ship(a, fleet_url, node="node-a")
        sid = a.store_id
        held = fleet_events(fleet_url, sid)
    shutil.copy(a_db, c_db)  # a cloned disk image
    refused = _ship_cli(c_db, fleet_url, "node-c")
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podstore: error:"), refused.stderr
    for words in ("refused", "another node, node-a", "node-c", "podstore reset-identity",
                  "podstore fleet rename-node node-a node-c"):  # fmt: skip
        assert words in lines[0], words
    # Nothing written, not even the refusal's count: the store is another node's (f0005).
    assert fleet_events(fleet_url, sid) == held
    (row,) = read.nodes(fleet_url).dicts()
    assert (row["node"], row["refusals"], row["last_refusal"]) == ("node-a", 0, None)

    # Both files go on: the clone's next event is not node-a's, and the fleet keeps node-a's.
    with PodStore.open(a_db) as a, PodStore.open(c_db) as c:
        a.insert("only-on-a", "main", "nvidia.com/gpu", {0: ["GPU-A"]}, None)
        c.insert("only-on-c", "main", "nvidia.com/gpu", {0: ["GPU-C"]}, None)
        # Even claiming node-a's name, the clone's history has diverged from what node-a
        # ships: whichever comes second is refused, never silently taken as the other.
        with pytest.raises(FleetRefusedError) as info:
            ship(a, fleet_url, node="node-a")
            ship(c, fleet_url, node="node-a")
        assert info.value.reason == "diverged"
        assert "refused" in str(info.value) and "diverged" in str(info.value)
        assert fleet_events(fleet_url, sid) == node_events(a)
        assert_same_state(fleet_url, a)
    owners = read.owners(fleet_url, "GPU-C").rows
    assert owners == []

    # The copy takes its own identity and ships as a node of its own.
    result = CliRunner().invoke(cli, ["--db", str(c_db), "reset-identity", "--yes"])
    assert result.exit_code == 0, result.output
    assert _ship_cli(c_db, fleet_url, "node-c").returncode == 0
    with PodStore.open(c_db, readonly=True) as c:
        assert c.store_id != sid
        assert_same_state(fleet_url, c)
    assert sorted(r["node"] for r in read.nodes(fleet_url).dicts()) == ["node-a", "node-c"]
    assert [r[0] for r in read.owners(fleet_url, "GPU-C").rows] == ["node-c"]
    assert all(r["problem"] is None for r in read.verify(fleet_url).dicts())


def test_a_store_id_edited_to_another_nodes_id_cannot_take_that_node_over(
    tmp_path: Path, fleet_url: str
) -> None:
    a_db, b_db = tmp_path / "a.db", tmp_path / "b.db"
    with busy_node(a_db, seed=2) as a:
        ship(a, fleet_url, node="node-a")
        victim = a.store_id
        before = fleet_events(fleet_url, victim)
    busy_node(b_db, seed=3, rounds=80).close()
    with sqlite3.connect(b_db) as raw:
        raw.execute("UPDATE store_meta SET value = ? WHERE key = 'store_id'", (victim,))
    raw.close()
    with PodStore.open(b_db, readonly=True, verify="off") as b:
        assert b.store_id == victim
        with pytest.raises(FleetRefusedError) as as_itself:
            ship(b, fleet_url, node="node-b")
        assert as_itself.value.reason == "another node" and "node-a" in str(as_itself.value)
        # Claiming node-a's name (a URL that may ship for any node): its chain is not node-a's.
        with pytest.raises(FleetRefusedError) as as_victim:
            ship(b, fleet_url, node="node-a")
        assert as_victim.value.reason == "diverged"
    assert fleet_events(fleet_url, victim) == before
    # The real node is not locked out.
    with PodStore.open(a_db) as a:
        a.insert("later", "main", "nvidia.com/gpu", {0: ["GPU-L"]}, None)
        assert ship(a, fleet_url, node="node-a").shipped == 1
        assert fleet_events(fleet_url, victim) == node_events(a)
    (row,) = read.nodes(fleet_url).dicts()
    assert row["refusals"] == 1  # the diverged chain under its own name; not another node's


def test_a_flip_flopping_node_name_is_refused_until_renamed(tmp_path: Path, fleet_url: str) -> None:
    db = tmp_path / "n.db"
    busy_node(db, seed=4).close()
    # A cron job without --node ships as the host name first...
    assert _ship_cli(db, fleet_url, "host-17").returncode == 0
    with PodStore.open(db) as store:
        store.insert("p-new", "main", "nvidia.com/gpu", {0: ["GPU-N"]}, None)
        sid = store.store_id
    shipped = fleet_last_seq(fleet_url, sid)
    # ...then the DaemonSet names it differently: refused, not relabelled.
    flip = _ship_cli(db, fleet_url, "gpu-node-17")
    assert flip.returncode == 1 and "another node, host-17" in flip.stderr
    assert rows(fleet_url, "SELECT node, refusals FROM fleet_stores") == [("host-17", 0)]
    assert fleet_last_seq(fleet_url, sid) == shipped  # the new event was not taken either
    # The operator settles the name; from then on the other one is refused.
    renamed = CliRunner().invoke(
        cli, ["fleet", "rename-node", "host-17", "gpu-node-17", "--url", fleet_url]
    )
    assert renamed.exit_code == 0 and "1 store(s)" in renamed.output
    assert _ship_cli(db, fleet_url, "gpu-node-17").returncode == 0
    assert _ship_cli(db, fleet_url, "host-17").returncode == 1
    (row,) = read.nodes(fleet_url).dicts()
    assert (row["node"], row["refusals"]) == ("gpu-node-17", 0)  # another node's: not counted
    log = rows(fleet_url, "SELECT action, detail FROM fleet_store_log")
    assert log == [("renamed", "node host-17 renamed to gpu-node-17")]
    with pytest.raises(Exception, match="no store of node"):
        admin.rename_node(fleet_url, "host-17", "x")


def test_a_retired_store_is_history_only(tmp_path: Path, fleet_url: str) -> None:
    import time

    from podstore.pure.times import format_ts
    from podstore.storage.events import utcnow

    db, other_db = tmp_path / "old.db", tmp_path / "other.db"
    with PodStore.open(db) as old, PodStore.open(other_db) as other:
        old.insert("p-old", "main", "nvidia.com/gpu", {0: ["GPU-R"]}, None)
        other.insert("p-other", "main", "nvidia.com/gpu", {0: ["GPU-R"]}, None)
        ship(old, fleet_url, node="reimaged")
        ship(other, fleet_url, node="other")
        sid = old.store_id
    time.sleep(0.05)
    before_retirement = format_ts(utcnow())
    time.sleep(0.05)
    result = CliRunner().invoke(cli, ["fleet", "retire", "--node", "reimaged", "--url", fleet_url])
    assert result.exit_code == 0 and f"retired store {sid}" in result.output
    # Gone from current state...
    assert [r[0] for r in read.owners(fleet_url, "GPU-R").rows] == ["other"]
    for view in ("v_fleet_allocations", "v_fleet_device_owners"):
        assert rows(fleet_url, f"SELECT DISTINCT node FROM {view}") == [("other",)]
    # ...kept as history: before its retirement it still held the device, after it not.
    at_then = [r[0] for r in read.owners(fleet_url, "GPU-R", at=before_retirement).rows]
    assert at_then == ["other", "reimaged"]
    assert [r[0] for r in read.owners(fleet_url, "GPU-R", at="2100-01-01T00:00:00Z").rows] == [
        "other"
    ]
    listed = {r["node"]: r for r in read.nodes(fleet_url).dicts()}
    assert listed["reimaged"]["retired_at"] is not None and listed["other"]["retired_at"] is None
    assert rows(fleet_url, "SELECT count(*) FROM fleet_events WHERE store_id = CAST(:s AS uuid)",
                {"s": sid}) == [(1,)]  # fmt: skip
    # A retired store ships no more, and retiring it again finds nothing in service.
    with PodStore.open(db) as old:
        old.insert("p-late", "main", "nvidia.com/gpu", {0: ["GPU-S"]}, None)
        with pytest.raises(FleetRefusedError) as info:
            ship(old, fleet_url, node="reimaged")
        assert info.value.reason == "retired" and "reset-identity" in str(info.value)
    again = CliRunner().invoke(cli, ["fleet", "retire", "--store", sid, "--url", fleet_url])
    assert again.exit_code == 1
    usage = CliRunner().invoke(cli, ["fleet", "retire", "--url", fleet_url])
    assert usage.exit_code == 2
