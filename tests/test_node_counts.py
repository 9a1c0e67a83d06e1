"""One definition of a pod: ``status``, the ``podstore_pods`` gauge and ``podstore pods`` agree
on a whole-node store, where some pods hold only CPUs, memory or DRA claims. The expectation
is read from the example node's files with the checkpoint readers, not from the store."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from harness.watch_support import podstore_command

from podstore import PodStore
from podstore.checkpoint import (
    FILE_NAMES,
    dumps_cpu_state,
    read_checkpoint,
    read_cpu_state,
    read_dra_state,
    read_memory_state,
)

NODE = Path(__file__).parent.parent / "examples" / "node"


def _run(db: Path, *args: str) -> str:
    res = subprocess.run(
        [*podstore_command(), "--db", str(db), *args], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _expected(kubelet: Path) -> dict[str, set[str]]:
    """Pod UID → its containers, from the four files."""
    pods: dict[str, set[str]] = {}
    for e in read_checkpoint(kubelet / FILE_NAMES["devices"]).entries:
        pods.setdefault(e.pod_uid, set()).add(e.container_name)
    for state in (
        read_cpu_state(kubelet / FILE_NAMES["cpu"]),
        read_memory_state(kubelet / FILE_NAMES["memory"]),
    ):
        for uid, containers in (state.entries or {}).items():
            pods.setdefault(uid, set()).update(containers or {})
    for claim in read_dra_state(kubelet / FILE_NAMES["dra"]).claims or []:
        for uid in claim.pod_uids or ():
            pods.setdefault(uid, set())
    return pods


def _with_cpu_only_pods(kubelet: Path, device_pod: str) -> None:
    """A pod holding only CPUs (two containers), and a device pod with a container of its
    own in the CPU manager's file only."""
    path = kubelet / FILE_NAMES["cpu"]
    state = read_cpu_state(path)
    entries = {uid: dict(c or {}) for uid, c in (state.entries or {}).items()}
    entries["cpu-only-pod"] = {"a": frozenset({8, 9}), "b": frozenset({10})}
    entries.setdefault(device_pod, {})["cpu-sidecar"] = frozenset({11})
    path.write_bytes(dumps_cpu_state(replace(state, entries=entries)))


@pytest.mark.parametrize("more", [False, True], ids=["example", "cpu-only-pods"])
def test_status_metric_and_pods_count_the_same_pods(tmp_path: Path, more: bool) -> None:
    node = tmp_path / "node"
    shutil.copytree(NODE, node)
    if more:
        first = read_checkpoint(node / "kubelet" / FILE_NAMES["devices"]).entries[0].pod_uid
        _with_cpu_only_pods(node / "kubelet", first)
    db = tmp_path / "s.db"
    _run(db, "import-node", str(node / "kubelet"), "--sysfs", str(node / "sys"),
         "--pod-logs", str(node / "pods"))  # fmt: skip
    expected = _expected(node / "kubelet")
    device_pods = {
        e.pod_uid for e in read_checkpoint(node / "kubelet" / FILE_NAMES["devices"]).entries
    }
    # The example holds pods the device plugins do not know: the case that disagreed.
    assert set(expected) - device_pods

    listed = json.loads(_run(db, "pods", "-o", "json"))
    assert {r["pod_uid"]: r["containers"] for r in listed} == {
        uid: len(c) for uid, c in expected.items()
    }
    status = json.loads(_run(db, "status", "-o", "json"))
    assert status["pods"] == len(expected)
    assert status["containers"] == sum(len(c) for c in expected.values())
    gauge = re.search(r"^podstore_pods (\S+)$", _run(db, "metrics"), re.M)
    assert gauge is not None and float(gauge[1]) == len(expected)
    with PodStore.open(db, readonly=True) as store:
        assert store.stats().pods == len(expected)
