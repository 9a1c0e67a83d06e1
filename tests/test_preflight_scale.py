"""``podstore preflight`` on a node of 1,200 pods (every manager's file, each with an entry per
pod) costs a bounded multiple of ``verify-checkpoint`` of the same files: it reads each file
for the columns, judges it for the release and runs the node checks, all linear in the file.
CPU time of the child processes, so that other load on the machine does not count."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

from harness.cli import ENTRY
from harness.nodegen import Node

from podstore.checkpoint import FILE_NAMES, format_cpuset

PODS = 1200
# Generous: preflight reads every file twice (columns, verdict) plus the checks; a quadratic
# check at this size would cost tens of times more.
BOUND = 6.0


def cpu_seconds(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run([*ENTRY, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return spent, run


def test_preflight_costs_a_bounded_multiple_of_verify(tmp_path: Path) -> None:
    node = Node(PODS)
    kubelet = node.write_kubelet_dir(tmp_path / "kubelet")
    sysfs = node.write_sysfs(tmp_path / "sys")
    online = frozenset().union(*node.topology().values())
    (sysfs / "devices" / "system" / "cpu").mkdir(parents=True)
    (sysfs / "devices" / "system" / "cpu" / "online").write_text(format_cpuset(online) + "\n")
    files = [str(kubelet / name) for name in FILE_NAMES.values()]

    verify, run = cpu_seconds(["verify-checkpoint", *files, "-o", "json"], tmp_path)
    assert run.returncode == 0, run.stderr
    pre, run = cpu_seconds(["preflight", str(kubelet), "--kubelet-version", "1.37",
                            "--sysfs", str(sysfs), "-o", "json"], tmp_path)  # fmt: skip
    rows = json.loads(run.stdout)
    assert {r["kind"] for r in rows if r["check"] is None} == set(FILE_NAMES)
    failing = [r for r in rows if r["check"] is not None and r["status"] != "ok"]
    assert not failing, failing
    report = f"{PODS} pods: verify-checkpoint {verify:.2f} s CPU, preflight {pre:.2f} s CPU"
    print(report)
    if os.environ.get("PODSTORE_SCALE_REPORT"):
        Path(os.environ["PODSTORE_SCALE_REPORT"]).write_text(report + "\n")
    assert pre <= BOUND * verify, report
