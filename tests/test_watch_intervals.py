"""End evidence from a watched node (``podstore watch --kubelet-dir``, a real subprocess): the
CPU manager and the pod-log directory letting a pod go end its device holding while kubelet
still lists the entry; a watch started again, or killed and started again, records no end
twice and loses none (the end is written in the same transaction as the event it follows
from)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
from dataclasses import replace
from pathlib import Path

from harness.nodegen import Node, pod_uid, replace_file
from harness.watch_support import podstore_command, wait_for

from podstore.checkpoint import FILE_NAMES, dumps_cpu_state


def _once(db: Path, root: Path) -> None:
    run = subprocess.run(
        [*podstore_command(), "--db", str(db), "watch", "--once", "--kubelet-dir",
         str(root / "kubelet"), "--sysfs", str(root / "sys"), "--pod-logs", str(root / "pods")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def _ends(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return [
            (str(p), str(s))
            for p, s in conn.execute(
                "SELECT pod_uid, json_extract(device_ids, '$.source') "
                "|| CASE WHEN resource LIKE 'dra:%' THEN ' (dra claim)' ELSE '' END "
                "FROM allocation_events "
                "WHERE op = 'end' ORDER BY seq"
            )
        ]


def _device_ends(db: Path) -> dict[str, str | None]:
    with sqlite3.connect(db) as conn:
        return {
            str(p): s
            for p, s in conn.execute(
                "SELECT pod_uid, end_source FROM v_allocation_intervals "
                "WHERE mechanism = 'device-plugin'"
            )
        }


def _events(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM allocation_events").fetchone()[0])


def _drop_from_cpu(root: Path, node: Node, gone: set[int]) -> None:
    cpu = node.cpu()
    cpu = replace(cpu, entries={k: v for k, v in cpu.entries.items()
                                if k not in {pod_uid(i) for i in gone}})  # fmt: skip
    replace_file(root / "kubelet" / FILE_NAMES["cpu"], dumps_cpu_state(cpu))


def _drop_logs(root: Path, node: Node, i: int) -> None:
    namespace, name = node.name_of(i)
    shutil.rmtree(root / "pods" / f"{namespace}_{name}_{pod_uid(i)}")


def test_restarts_record_each_end_once(tmp_path: Path) -> None:
    node = Node(3)
    node.write_all(tmp_path)
    db = tmp_path / "s.db"
    _once(db, tmp_path)
    assert set(_device_ends(db).values()) == {None}

    # Pod 0's container leaves the CPU manager and its log directory goes; its device entry
    # stays in the device file (kubelet drops it at its next allocation).
    _drop_from_cpu(tmp_path, node, {0})
    _once(db, tmp_path)
    _drop_logs(tmp_path, node, 0)  # later: ends only the pod's DRA claim
    _once(db, tmp_path)
    p0 = [(pod_uid(0), "cpu"), (pod_uid(0), "pod-logs (dra claim)")]
    assert _ends(db) == p0
    events = _events(db)
    _once(db, tmp_path)  # started again: nothing new
    assert _events(db) == events

    # Pod 1's log directory goes while a following watch runs; it is killed, then started.
    proc = subprocess.Popen(
        [*podstore_command(), "--db", str(db), "watch", "--kubelet-dir", str(tmp_path / "kubelet"),
         "--sysfs", str(tmp_path / "sys"), "--pod-logs", str(tmp_path / "pods"),
         "--interval", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _drop_logs(tmp_path, node, 1)
        wait_for(lambda: len(_ends(db)) == 4, 60, step=0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    _once(db, tmp_path)
    _once(db, tmp_path)
    assert _ends(db) == [*p0, (pod_uid(1), "pod-logs"), (pod_uid(1), "pod-logs (dra claim)")]
    assert _device_ends(db) == {pod_uid(0): "cpu", pod_uid(1): "pod-logs", pod_uid(2): None}
