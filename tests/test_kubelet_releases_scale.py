"""verify-checkpoint --kubelet-version on a 1,200-pod CPU file costs about what plain
verify-checkpoint does: the file is examined once, then only looked up in the release table."""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path


def cpu_seconds(*args: str | Path, cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(["podstore", *map(str, args)], cwd=cwd, capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_verdict_costs_little_over_plain_verify(tmp_path: Path) -> None:
    entries = {f"pod-{i:05d}": {"c": str(i % 60 + 4)} for i in range(1200)}
    f = tmp_path / "cpu_manager_state"
    doc = {"policyName": "static", "defaultCpuSet": "0-3", "entries": entries, "checksum": 0}
    f.write_text(json.dumps(doc))
    plain = cpu_seconds("verify-checkpoint", f, cwd=tmp_path)
    judged = cpu_seconds("verify-checkpoint", "--kubelet-version", "1.35", f, cwd=tmp_path)
    assert judged < 4 * plain + 0.5, (plain, judged)
