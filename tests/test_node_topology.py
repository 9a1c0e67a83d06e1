"""The NUMA topology read from fake sysfs trees, junk included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podstore.checkpoint import NumaTopology, read_numa_topology


def _node(sysfs: Path, name: str, cpulist: str | bytes | None) -> Path:
    d = sysfs / "devices" / "system" / "node" / name
    d.mkdir(parents=True)
    if cpulist is not None:
        data = cpulist.encode() if isinstance(cpulist, str) else cpulist
        (d / "cpulist").write_bytes(data)
    return d


def test_two_nodes_as_the_kernel_writes_them(tmp_path: Path) -> None:
    _node(tmp_path, "node0", "0-15,32-47\n")
    _node(tmp_path, "node1", "16-31,48-63\n")
    # Files the kernel puts beside the node directories.
    base = tmp_path / "devices" / "system" / "node"
    (base / "online").write_text("0-1\n")
    (base / "possible").write_text("0-1\n")
    (base / "has_cpu").write_text("0-1\n")
    topo = read_numa_topology(tmp_path)
    assert topo == NumaTopology(
        {0: frozenset([*range(16), *range(32, 48)]), 1: frozenset([*range(16, 32), *range(48, 64)])}
    )
    nodes = topo.cpu_nodes()
    assert (nodes[0], nodes[15], nodes[16], nodes[47], nodes[63]) == (0, 0, 1, 0, 1)
    assert topo.node_of(40) == 0 and topo.node_of(64) is None


def test_no_node_directory_means_no_topology(tmp_path: Path) -> None:
    assert read_numa_topology(tmp_path) is None  # no devices/system/node at all
    (tmp_path / "devices" / "system" / "node").mkdir(parents=True)
    assert read_numa_topology(tmp_path) is None  # the directory, but no node in it
    assert read_numa_topology(tmp_path / "absent") is None


def test_a_node_without_cpus_is_kept(tmp_path: Path) -> None:
    _node(tmp_path, "node0", "0-3\n")
    _node(tmp_path, "node1", "\n")  # a memory-only node (CXL, or all its CPUs offline)
    topo = read_numa_topology(tmp_path)
    assert topo is not None and topo.nodes == {0: frozenset(range(4)), 1: frozenset()}


def test_junk_entries_are_skipped_and_named(tmp_path: Path) -> None:
    _node(tmp_path, "node0", "0-1\n")
    _node(tmp_path, "node2", "4-5\n")  # ids need not be contiguous
    _node(tmp_path, "node10", "6\n")
    _node(tmp_path, "nodeX", "2\n")
    _node(tmp_path, "node01", "2\n")  # not how the kernel names node 1
    _node(tmp_path, "node3", None)  # no cpulist
    _node(tmp_path, "node4", "0-x\n")  # not a CPU list
    _node(tmp_path, "node5", b"\xff\xfe")  # not text
    _node(tmp_path, "node6", "1,7\n")  # CPU 1 is node 0's already
    _node(tmp_path, "node7", "0-99999999\n")  # beyond any machine
    (tmp_path / "devices" / "system" / "node" / "node8").write_text("a file, not a node\n")
    (tmp_path / "devices" / "system" / "node" / "memory0").mkdir()  # not node-named: ignored
    topo = read_numa_topology(tmp_path)
    assert topo is not None
    assert topo.nodes == {0: {0, 1}, 2: {4, 5}, 6: {7}, 10: {6}}
    reasons = dict(s.split(": ", 1) for s in topo.skipped)
    assert set(reasons) == {"nodeX", "node01", "node3", "node4", "node5", "node6", "node7", "node8"}
    assert "cannot read cpulist" in reasons["node3"] and "cannot read cpulist" in reasons["node8"]
    assert "not ASCII" in reasons["node5"]
    assert "already listed" in reasons["node6"] and "[1]" in reasons["node6"]
    assert "above the limit" in reasons["node7"]
    assert all("\n" not in s for s in topo.skipped)


def test_a_cpu_listed_twice_stays_with_the_lower_node_id(tmp_path: Path) -> None:
    """Nodes are visited by number, not by name: ``node10`` sorts before ``node2`` as text,
    yet CPU 5, listed by both, is node 2's (the lower id), and node 10 is named skipped."""
    _node(tmp_path, "node2", "4-5\n")
    _node(tmp_path, "node10", "5-6\n")
    _node(tmp_path, "node1", "0-3\n")
    topo = read_numa_topology(tmp_path)
    assert topo is not None
    assert topo.nodes == {1: {0, 1, 2, 3}, 2: {4, 5}, 10: {6}}
    reasons = dict(s.split(": ", 1) for s in topo.skipped)
    assert set(reasons) == {"node10"} and "[5]" in reasons["node10"]
    assert topo.cpu_nodes()[5] == 2 and topo.node_of(5) == 2


def test_an_oversized_cpulist_is_skipped(tmp_path: Path) -> None:
    _node(tmp_path, "node0", "0\n")
    _node(tmp_path, "node1", "1," * 40000)
    topo = read_numa_topology(tmp_path)
    assert topo is not None and topo.nodes == {0: {0}}
    assert topo.skipped == ("node1: cpulist longer than 65536 bytes",)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_node_is_skipped(tmp_path: Path) -> None:
    _node(tmp_path, "node0", "0\n")
    cpulist = _node(tmp_path, "node1", "1\n") / "cpulist"
    cpulist.chmod(0)
    try:
        topo = read_numa_topology(tmp_path)
    finally:
        cpulist.chmod(0o644)
    assert topo is not None and topo.nodes == {0: {0}}
    assert topo.skipped[0].startswith("node1: cannot read cpulist")


def test_this_machines_sysfs_reads_without_error() -> None:
    topo = read_numa_topology()
    if topo is None:
        pytest.skip("this machine lists no NUMA node in /sys")
    assert all(isinstance(n, int) for n in topo.nodes)
    assert len(topo.cpu_nodes()) >= 1
