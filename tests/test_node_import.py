"""``import-node`` on fake nodes (kubelet dir + sysfs + /var/log/pods trees), and what the
views, ``topology``, ``get``, ``pods``, ``owners``, ``history`` and ``verify`` then say.

Every expectation is computed from the :class:`Node` description (tests/harness/nodegen.py),
not read back from the store."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness.nodegen import GIB, GPU, NIC, Node, claim_uid, pod_uid, replace_file
from harness.refmodel import table_dump
from harness.watch_support import podstore_command

from podstore import PodStore, check_store
from podstore.checkpoint import FILE_NAMES, KINDS, dumps_cpu_state
from podstore.errors import CheckpointCorruptError, CheckpointNotFoundError, PodStoreError
from podstore.storage.node import sync as node_sync


def _load(node: Node, root: Path, **kw: Any) -> tuple[Path, Any]:
    kubelet, sysfs, logs = node.write_all(root)
    db = root / "s.db"
    with PodStore.open(db) as store:
        report = store.import_node(kubelet, sysfs=sysfs, pod_logs=logs, **kw)
    return db, report


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with PodStore.open(db, readonly=True) as store:
        return [tuple(r) for r in store.query(sql).rows]


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*podstore_command(), "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _expected_numa(node: Node) -> list[tuple[Any, ...]]:
    out = []
    for i in range(node.pods):
        ns, name = node.name_of(i)
        dev, own = node.gpu_node_of(i), node.node_of(i)
        out.append(
            (pod_uid(i), ns, name, "main", f"[{dev}]", f"[{own}]", f"[{own}]", int(dev == own))
        )
    return sorted(out)


NUMA_SQL = (
    "SELECT pod_uid, namespace, pod_name, container, device_numa, cpu_numa, memory_numa, "
    "aligned FROM v_container_numa ORDER BY pod_uid"
)


@pytest.mark.parametrize(
    "node",
    [
        Node(6),  # aligned, two NUMA nodes
        Node(6, misaligned={1, 4}),
        Node(9, numa=4, misaligned={2}),  # multi-NUMA
        Node(1, numa=1),
    ],
    ids=["aligned", "misaligned", "four-numa", "one-numa"],
)
def test_views_say_what_the_node_holds(node: Node, tmp_path: Path) -> None:
    db, report = _load(node, tmp_path)
    assert set(report.checkpoints) == set(KINDS) and report.absent == ()
    assert report.topology is not None and report.names is not None
    assert report.topology.items == node.numa and report.names.items == node.pods
    assert _rows(db, NUMA_SQL) == _expected_numa(node)
    misaligned = sorted(pod_uid(i) for i in node.misaligned)
    assert [r[0] for r in _rows(db, "SELECT pod_uid FROM v_numa_misaligned")] == misaligned
    cpus = sorted(
        (pod_uid(i), "main", c, node.node_of(i)) for i in range(node.pods) for c in node.cpus_of(i)
    )
    assert _rows(db, "SELECT * FROM v_cpu_assignments ORDER BY pod_uid, cpu") == cpus
    held = {c for i in range(node.pods) for c in node.cpus_of(i)}
    shared = sorted((c, n) for n, cs in node.topology().items() for c in cs if c not in held)
    assert _rows(db, "SELECT cpu, numa_node FROM v_shared_cpus ORDER BY cpu") == shared
    memory = sorted(
        (pod_uid(i), "main", "memory", GIB, f"[{node.node_of(i)}]") for i in range(node.pods)
    )
    assert _rows(db, "SELECT * FROM v_memory_assignments ORDER BY pod_uid") == memory
    per_node = {
        n: sum(1 for i in range(node.pods) if node.node_of(i) == n) for n in range(node.numa)
    }
    assert _rows(db, "SELECT numa_node, reserved, free FROM v_memory_numa ORDER BY 1") == [
        (n, per_node[n] * GIB, 63 * GIB - per_node[n] * GIB) for n in range(node.numa)
    ]
    dra = sorted(
        (claim_uid(i), node.name_of(i)[0], f"nic-{i}", pod_uid(i), NIC, "pool-a", f"nic-{i}",
         None, '["nic"]', f'["{NIC}/nic=nic-{i}"]')
        for i in range(node.pods)
    )  # fmt: skip
    assert _rows(db, "SELECT * FROM v_dra_devices ORDER BY claim_uid") == dra
    names = sorted((pod_uid(i), *node.name_of(i)) for i in range(node.pods))
    assert _rows(db, "SELECT * FROM v_pod_names ORDER BY pod_uid") == names
    assert check_store(db) == []
    # The API says the same as the views.
    with PodStore.open(db, readonly=True) as store:
        got = [(c.pod_uid, c.aligned) for c in store.container_numa()]
        assert got == [(r[0], bool(r[7])) for r in _expected_numa(node)]
        assert [c.pod_uid for c in store.container_numa(misaligned=True)] == misaligned


def test_a_second_import_writes_nothing_and_a_change_writes_one_event(tmp_path: Path) -> None:
    node = Node(4)
    db, first = _load(node, tmp_path)
    assert first.events > 0
    kubelet, sysfs, logs = tmp_path / "kubelet", tmp_path / "sys", tmp_path / "pods"
    with PodStore.open(db) as store:
        again = store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
        assert again.events == 0
        state = node.cpu()
        moved = dict(state.entries)
        moved[pod_uid(0)] = {"main": frozenset({0, 1})}
        state.entries = moved
        state.default_cpu_set = state.default_cpu_set - {0, 1} | node.cpus_of(0)
        replace_file(kubelet / FILE_NAMES["cpu"], dumps_cpu_state(state))
        report = store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
        assert report.checkpoints["cpu"].written == 2  # the container's CPUs, the shared pool
        assert report.events == 2
    assert _rows(db, f"SELECT cpu FROM v_cpu_assignments WHERE pod_uid = '{pod_uid(0)}'") == [
        (0,),
        (1,),
    ]


def test_no_topology_leaves_the_numa_of_cpus_unknown(tmp_path: Path) -> None:
    node = Node(4, misaligned={1})
    kubelet = node.write_kubelet_dir(tmp_path / "kubelet")
    logs = node.write_pod_logs(tmp_path / "pods")
    # A sysfs of a machine without NUMA support: devices/system, and no node directory.
    empty = tmp_path / "sys"
    (empty / "devices" / "system" / "cpu").mkdir(parents=True)
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        report = store.import_node(kubelet, sysfs=empty, pod_logs=logs)
    assert report.topology is not None and report.topology.items == 0
    assert _rows(db, "SELECT DISTINCT numa_node FROM v_cpu_assignments") == [(None,)]
    assert _rows(db, "SELECT DISTINCT numa_node FROM v_shared_cpus") == [(None,)]
    # Devices and memory still say where they are: two known sets, so the rule still applies.
    rows = _rows(db, "SELECT pod_uid, cpu_numa, aligned FROM v_container_numa ORDER BY 1")
    assert rows == [
        (pod_uid(i), None, int(node.gpu_node_of(i) == node.node_of(i))) for i in range(4)
    ]


def test_cpus_outside_the_topology_have_no_numa_node(tmp_path: Path) -> None:
    node = Node(4)
    kubelet, sysfs, logs = node.write_all(tmp_path)
    # The kernel lists only NUMA node 0 (a CPU offline, a partial tree).
    shutil.rmtree(sysfs / "devices" / "system" / "node" / "node1")
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
    got = _rows(db, "SELECT pod_uid, numa_node FROM v_cpu_assignments GROUP BY pod_uid")
    assert got == [(pod_uid(i), 0 if node.node_of(i) == 0 else None) for i in range(4)]
    # Pods on node 1: only devices and memory known (both on 1) → aligned; cpu_numa NULL.
    rows = _rows(db, "SELECT pod_uid, cpu_numa, aligned FROM v_container_numa ORDER BY 1")
    assert rows == [(pod_uid(i), "[0]" if node.node_of(i) == 0 else None, 1) for i in range(4)]


def test_a_new_topology_may_move_cpus_between_numa_nodes(tmp_path: Path) -> None:
    """A machine re-read with another layout (a BIOS setting, sub-NUMA clustering): CPUs
    change node, in whichever order the nodes' items are written."""
    before = Node(4, cpus_per_node=8).write_all(tmp_path / "before")
    after = Node(4, cpus_per_node=10).write_all(tmp_path / "after")
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.import_node(before[0], sysfs=before[1], pod_logs=before[2])
        assert _rows(db, "SELECT numa_node FROM numa_cpus WHERE cpu = 8") == [(1,)]
        store.import_node(before[0], sysfs=after[1], pod_logs=before[2])
    assert _rows(db, "SELECT numa_node, count(*) FROM numa_cpus GROUP BY 1") == [(0, 10), (1, 10)]
    assert _rows(db, "SELECT numa_node FROM numa_cpus WHERE cpu = 8") == [(0,)]
    assert check_store(db) == []


@pytest.mark.parametrize("missing", ["cpu", "memory", "dra", "devices"])
def test_a_missing_file_leaves_its_kind_as_it_was(missing: str, tmp_path: Path) -> None:
    node = Node(3, misaligned={0})
    db, _ = _load(node, tmp_path)
    before = table_dump(db)
    (tmp_path / "kubelet" / FILE_NAMES[missing]).unlink()
    with PodStore.open(db) as store:
        report = store.import_node(tmp_path / "kubelet", sysfs=tmp_path / "sys",
                                   pod_logs=tmp_path / "pods")  # fmt: skip
    assert report.absent == (missing,) and missing not in report.checkpoints
    assert report.events == 0
    assert table_dump(db) == before


def test_a_mistyped_sysfs_or_pod_logs_leaves_the_stored_facts(tmp_path: Path) -> None:
    """A source that is not there (a typo) is like an absent file: its facts stay as they
    were, the report says so, and the command succeeds for what was there."""
    node = Node(3, misaligned={0})
    db, _ = _load(node, tmp_path)
    before = table_dump(db)
    typo_sys, typo_logs = tmp_path / "sys-typo", tmp_path / "pods-typo"
    with PodStore.open(db) as store:
        report = store.import_node(tmp_path / "kubelet", sysfs=typo_sys, pod_logs=typo_logs)
    assert report.topology is None and report.names is None and report.events == 0
    assert table_dump(db) == before
    res = _cli(db, "import-node", str(tmp_path / "kubelet"), "--sysfs", str(typo_sys),
               "--pod-logs", str(typo_logs))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"absent: NUMA topology: {typo_sys} is no sysfs (left as it was)" in res.stdout
    assert f"absent: pod names: {typo_logs} is no directory (left as it was)" in res.stdout
    assert table_dump(db) == before
    assert _rows(db, "SELECT pod_uid FROM v_numa_misaligned") == [(pod_uid(0),)]


def test_a_directory_without_any_checkpoint_is_refused(tmp_path: Path) -> None:
    """``import-node /mistyped/kubelet``: no source of kubelet's at all is an error, and the
    local sysfs and pod logs are not read into the store either."""
    node = Node(3)
    db, _ = _load(node, tmp_path)
    before = table_dump(db)
    other = Node(5, numa=4)
    sysfs, logs = other.write_sysfs(tmp_path / "sys2"), other.write_pod_logs(tmp_path / "pods2")
    for kubelet in (tmp_path / "mistyped", tmp_path / "pods"):  # missing; holding no file
        with PodStore.open(db) as store, pytest.raises(CheckpointNotFoundError):
            store.import_node(kubelet, sysfs=sysfs, pod_logs=logs)
        res = _cli(db, "import-node", str(kubelet), "--sysfs", str(sysfs), "--pod-logs", str(logs))
        assert res.returncode == 1 and res.stdout == ""
        assert "none of kubelet's checkpoint files" in res.stderr
    assert table_dump(db) == before


def test_a_fresh_store_without_some_files(tmp_path: Path) -> None:
    node = Node(2)
    kubelet = node.write_kubelet_dir(tmp_path / "kubelet", kinds=("devices", "cpu"))
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        report = store.import_node(
            kubelet, sysfs=node.write_sysfs(tmp_path / "sys"), pod_logs=tmp_path / "nothing"
        )
        assert report.absent == ("memory", "dra")
        assert store.memory_state() is None and store.dra_state() is None
        assert store.pod_names() == {}
    assert _rows(db, "SELECT count(*) FROM v_memory_assignments") == [(0,)]


@pytest.mark.parametrize("bad", ["cpu", "memory", "dra", "devices"])
def test_a_bad_file_refuses_the_whole_command(bad: str, tmp_path: Path) -> None:
    node = Node(3)
    db, _ = _load(node, tmp_path)
    before = table_dump(db)
    # Every other file changes (a new pod name, moved CPUs, ...), and one is corrupt.
    changed = Node(4, misaligned={2})
    changed.write_all(tmp_path)
    shutil.rmtree(tmp_path / "pods")
    changed.write_pod_logs(tmp_path / "pods")
    path = tmp_path / "kubelet" / FILE_NAMES[bad]
    data = bytearray(path.read_bytes())
    at = data.rindex(b"pool-a" if bad == "dra" else b"main")  # inside the checksummed text
    data[at] = ord("M")
    path.write_bytes(bytes(data))
    with PodStore.open(db) as store, pytest.raises(PodStoreError) as caught:
        store.import_node(tmp_path / "kubelet", sysfs=tmp_path / "sys", pod_logs=tmp_path / "pods")
    assert isinstance(caught.value, CheckpointCorruptError), caught.value
    assert table_dump(db) == before
    res = _cli(db, "import-node", str(tmp_path / "kubelet"), "--sysfs", str(tmp_path / "sys"),
               "--pod-logs", str(tmp_path / "pods"))  # fmt: skip
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith("podstore: error: ") and res.stderr.count("\n") == 1
    assert str(path) in res.stderr or FILE_NAMES[bad].split("/")[-1] in res.stderr
    assert table_dump(db) == before


def test_import_node_cli_reports_each_part(tmp_path: Path) -> None:
    node = Node(2)
    kubelet = node.write_kubelet_dir(tmp_path / "kubelet", kinds=("devices", "cpu", "dra"))
    sysfs = node.write_sysfs(tmp_path / "sys")
    logs = node.write_pod_logs(tmp_path / "pods")
    (logs / "not-a-pod-dir").mkdir()
    db = tmp_path / "s.db"
    res = _cli(db, "import-node", str(kubelet), "--sysfs", str(sysfs), "--pod-logs", str(logs))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("imported device manager checkpoint from ")
    assert "2 entries, 2 inserted" in lines[0]
    assert lines[1].startswith("imported CPU manager state ") and "[v4]" in lines[1]
    assert lines[2].startswith("imported DRA manager state ")
    assert lines[3] == "absent: memory manager state (left as it was)"
    assert lines[4].startswith("imported NUMA topology from ") and "2 items, 2 written" in lines[4]
    assert lines[5].startswith("imported pod names from ") and "2 items, 2 written" in lines[5]
    assert lines[6].startswith("  skipped ") and "not-a-pod-dir" in lines[6]


def test_topology_command(tmp_path: Path) -> None:
    node = Node(4, misaligned={1})
    db, _ = _load(node, tmp_path)
    res = _cli(db, "topology", "-o", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    by = {(r["numa_node"], r["kind"], r["name"]): r for r in rows}
    for n in range(2):
        on = [i for i in range(4) if node.node_of(i) == n]
        ex = by[(n, "cpu", "exclusive")]
        assert ex["held"] == 2 * len(on) and ex["total"] == node.cpus_per_node
        assert sorted(ex["holders"]) == sorted(
            "{}/{}/main={}".format(*node.name_of(i), "-".join(map(str, sorted(node.cpus_of(i)))))
            for i in on
        )
        assert by[(n, "cpu", "shared")]["held"] == node.cpus_per_node - 2 * len(on)
        mem = by[(n, "memory", "memory")]
        assert (mem["held"], mem["total"]) == (len(on) * GIB, 63 * GIB)
        gpus = [i for i in range(4) if node.gpu_node_of(i) == n]
        assert by[(n, "device", GPU)]["held"] == len(gpus)
    assert by[(None, "dra", NIC)]["held"] == 4
    assert [r["numa_node"] for r in rows] == sorted(
        (r["numa_node"] for r in rows), key=lambda v: (v is None, v or 0)
    )
    res = _cli(db, "topology", "--misaligned", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [
        {"pod_uid": pod_uid(1), "namespace": "team-1", "pod_name": "trainer-1",
         "container": "main", "device_numa": [0], "cpu_numa": [1], "memory_numa": [1]}
    ]  # fmt: skip
    with PodStore.open(db, readonly=True) as store:
        assert [(u.numa_node, u.kind, u.name, u.held) for u in store.topology()] == [
            (r["numa_node"], r["kind"], r["name"], r["held"]) for r in rows
        ]


def test_listings_show_names_cpus_memory_and_claims(tmp_path: Path) -> None:
    node = Node(3)
    db, _ = _load(node, tmp_path)
    pods = json.loads(_cli(db, "pods", "-o", "json").stdout)
    assert [(p["pod_uid"], p["namespace"], p["name"], p["cpus"], p["memory_bytes"], p["claims"])
            for p in pods] == [
        (pod_uid(i), *node.name_of(i), 2, GIB, 1) for i in range(3)
    ]  # fmt: skip
    got = json.loads(_cli(db, "get", pod_uid(2), "-o", "json").stdout)
    keys = ("manager", "resource", "numa_node", "device_ids", "claim")
    shown = [tuple(r[k] for k in keys) for r in got]
    assert shown == [
        ("devices", GPU, 0, ["GPU-2"], None),
        ("cpu", "cpu", 0, ["-".join(map(str, sorted(node.cpus_of(2))))], None),
        ("memory", "memory", 0, [], None),
        ("dra", NIC, None, ["pool-a/nic-2"], "team-2/nic-2"),
    ]  # fmt: skip
    assert {(r["namespace"], r["pod_name"]) for r in got} == {node.name_of(2)}
    devs = json.loads(_cli(db, "devices", "-o", "json").stdout)
    assert {(d["device_id"], d["namespace"], d["name"]) for d in devs} == {
        (f"GPU-{i}", *node.name_of(i)) for i in range(3)
    }
    owners = json.loads(_cli(db, "owners", f"{NIC}/pool-a/nic-1", "-o", "json").stdout)
    assert owners == [
        {"pod_uid": pod_uid(1), "container": None, "resource": NIC, "namespace": "team-1",
         "name": "trainer-1", "claim": "team-1/nic-1"}
    ]  # fmt: skip
    owners = json.loads(_cli(db, "owners", "GPU-1", "-o", "json").stdout)
    assert [(o["pod_uid"], o["name"]) for o in owners] == [(pod_uid(1), "trainer-1")]


def test_history_keeps_names_of_deleted_pods_and_the_manager(tmp_path: Path) -> None:
    node = Node(2)
    db, _ = _load(node, tmp_path)
    # Pod 1 goes from every file and from /var/log/pods.
    Node(1).write_all(tmp_path)
    shutil.rmtree(tmp_path / "pods")
    Node(1).write_pod_logs(tmp_path / "pods")
    with PodStore.open(db) as store:
        at = store.history()[-1].timestamp
        store.import_node(tmp_path / "kubelet", sysfs=tmp_path / "sys", pod_logs=tmp_path / "pods")
        assert pod_uid(1) not in store.pod_names()
        assert store.pod_names(past=True)[pod_uid(1)].name == "trainer-1"
        assert [o.pod_uid for o in store.dra_owners(f"{NIC}/pool-a/nic-1")] == []
        assert [o.pod_uid for o in store.dra_owners_at(f"{NIC}/pool-a/nic-1", at)] == [pod_uid(1)]
    events = json.loads(_cli(db, "history", "--pod", pod_uid(1), "-o", "json").stdout)
    # The pod's claims' events too (keyed by the claim, found by the pods it lists).
    assert {e["manager"] for e in events} == {"devices", "cpu", "memory", "node", "dra"}
    assert [e["op"] for e in events if e["manager"] == "dra"] == ["dra-set", "dra-delete"]
    # A claim's events are keyed by the claim, found by its device's name.
    claims = json.loads(_cli(db, "history", "--device", f"{NIC}/pool-a/nic-1", "-o", "json").stdout)
    assert [(e["manager"], e["op"]) for e in claims] == [("dra", "dra-set"), ("dra", "dra-delete")]
    assert {e["name"] for e in events if e["pod_uid"] is not None} == {"trainer-1"}
    assert any(e["op"] == "cpu-delete" for e in events)


# ---- verify: the managers' invariants -------------------------------------------------------

PLANTS = {
    "cpu-two-pods": [
        "INSERT INTO cpu_assignment_cpus SELECT a.id, c.cpu FROM cpu_assignments a,"
        " cpu_assignment_cpus c JOIN cpu_assignments b ON b.id = c.assignment_id"
        f" WHERE a.pod_uid = '{pod_uid(1)}' AND b.pod_uid = '{pod_uid(0)}'"
    ],
    "cpu-also-shared": ["INSERT INTO cpu_shared SELECT min(cpu) FROM cpu_assignment_cpus"],
    "memory-over-allocatable": ["UPDATE memory_numa_tables SET reserved = allocatable + 1"],
    "dra-device-two-claims": ["UPDATE dra_devices SET device = 'nic-0'"],
    "orphan-block-numa": ["DELETE FROM memory_blocks"],
    "orphan-dra-devices": ["PRAGMA foreign_keys = OFF", "DELETE FROM dra_claim_drivers"],
    # A change of the rows behind node_items' back that breaks no other rule.
    "node-items": ["UPDATE pod_names SET name = name || '-renamed'"],
}


@pytest.fixture(scope="module")
def clean_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify")
    db, _ = _load(Node(3), root)
    return db


def _items_refilled(conn: sqlite3.Connection) -> None:
    """node_items made to hold what raw SQL left (as the first write after revision 0008's
    upgrade fills it): a store as consistent as a podstore write would leave it."""
    conn.execute("INSERT INTO store_meta (key, value) VALUES ('node_items_pending', '1')")
    node_sync.fill_pending(conn)


@pytest.mark.parametrize("check", sorted(PLANTS))
def test_verify_finds_each_planted_break(check: str, clean_node: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(clean_node, db)
    assert check_store(db) == []
    conn = sqlite3.connect(db)
    for statement in PLANTS[check]:
        conn.execute(statement)  # a plain connection: foreign keys are not enforced
    conn.commit()
    conn.close()
    found = check_store(db)
    # Every plant changes an item's rows without podstore, so node_items disagrees too.
    expected = [check] if check == "node-items" else [check, "node-items"]
    assert [f.check for f in found if f.severity == "error"] == expected, found
    res = _cli(db, "verify")
    assert res.returncode == 1 and check in res.stdout + res.stderr


def test_a_shared_device_with_share_ids_is_no_break(clean_node: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(clean_node, db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE dra_devices SET device = 'nic-0', share_id = 'share-' || claim_id")
    _items_refilled(conn)
    conn.commit()
    conn.close()
    assert check_store(db) == []


def test_containers_of_one_pod_may_share_cpus(clean_node: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    shutil.copy(clean_node, db)
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO cpu_assignments (pod_uid, container) SELECT pod_uid, 'init' "
        "FROM cpu_assignments WHERE container = 'main' LIMIT 1"
    )
    conn.execute(
        "INSERT INTO cpu_assignment_cpus SELECT (SELECT id FROM cpu_assignments WHERE "
        "container = 'init'), c.cpu FROM cpu_assignment_cpus c JOIN cpu_assignments a "
        "ON a.id = c.assignment_id WHERE a.container = 'main' AND a.pod_uid = "
        "(SELECT pod_uid FROM cpu_assignments WHERE container = 'init')"
    )
    _items_refilled(conn)
    conn.commit()
    conn.close()
    assert check_store(db) == []
