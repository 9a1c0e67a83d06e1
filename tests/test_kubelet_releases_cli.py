"""``verify-checkpoint --kubelet-version`` and ``export --kubelet-version`` through real
``podstore`` processes; a file written for a release is accepted by it, read as the format
written (docs/kubelet-release-table.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from podstore.checkpoint.releases import parse_release, written_format
from podstore.checkpoint.verdict import judge_file

NODE = Path(__file__).parent / "vectors" / "node"
DEVICE = Path(__file__).parent / "vectors"
ON = "PodLevelResourceManagers=true"


def podstore(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podstore", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def verify(tmp_path: Path, *args: str | Path) -> tuple[int, list[dict[str, object]]]:
    res = podstore("verify-checkpoint", "-o", "json", *args, cwd=tmp_path)
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else []


def test_verdict_columns_and_exit(tmp_path: Path) -> None:
    rc, rows = verify(tmp_path, "--kubelet-version", "1.35", NODE / "cpu-v3-pod-entries.json")
    assert rc == 1
    assert rows[0]["verdict"] == "refuse"
    assert rows[0]["kubelet_version"] == "1.35"
    assert rows[0]["accepted_by"] == ["1.37"]
    assert "checkpoint is corrupted" in str(rows[0]["error"])
    rc, rows = verify(
        tmp_path, "--kubelet-version", "1.36", "--feature-gates", ON,
        NODE / "cpu-v3-pod-entries.json", DEVICE / "hand-v1.json",
    )  # fmt: skip
    assert rc == 0
    # D1 is not read after 1.30 (PR #123398): the device manager starts empty, no refusal
    assert [r["read_as"] for r in rows] == ["v3", None]
    assert rows[1]["drops"] == ["all entries: file unreadable"]
    assert rows[1]["accepted_by"] == ["1.18-1.19", "1.23-1.30"]


def test_without_the_option_the_verdict_is_for_any_release_and_the_exit_is_todays(
    tmp_path: Path,
) -> None:
    # A file newer releases refuse: judged for 'any' release it is accepted, exit 0 as before.
    rc, rows = verify(tmp_path, NODE / "cpu-v3-pod-entries.json", DEVICE / "hand-v1.json")
    assert rc == 0
    assert [r["kubelet_version"] for r in rows] == ["any", "any"]
    assert [r["verdict"] for r in rows] == ["accept", "accept"]
    assert rows[1]["accepted_by"] == ["1.18-1.19", "1.23-1.30"]
    assert rows[0]["drops"] == [] and rows[0]["accepted_by"]


@pytest.mark.parametrize("bad", ["1.17", "1.38", "2", "latest"])
def test_unknown_release_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    res = podstore(
        "verify-checkpoint", "--kubelet-version", bad, NODE / "cpu-v2-pod.json", cwd=tmp_path
    )
    assert res.returncode == 2
    assert "1.18..1.37" in res.stderr


def test_malformed_gates_are_a_usage_error(tmp_path: Path) -> None:
    res = podstore(
        "verify-checkpoint", "--kubelet-version", "1.36", "--feature-gates", "Pod=maybe",
        NODE / "cpu-v2-pod.json", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2


@pytest.mark.parametrize(
    ("source", "kind", "version", "gates"),
    [
        (NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "1.35", ""),
        (NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "1.36", ON),
        (NODE / "cpu-v4-embedded-v2-pod-entries.json", "cpu", "1.37", ON),
        (NODE / "memory-v3-pod-entries.json", "memory", "1.35", ""),
        (NODE / "memory-v3-pod-entries.json", "memory", "1.36", ON),
        (NODE / "dra-data-entries-single.json", "dra", "1.31", ""),
        (NODE / "dra-data-entries-single.json", "dra", "1.32", ""),
        (DEVICE / "hand-all-fields.json", "devices", "1.19", ""),
    ],
)
def test_a_file_written_for_a_release_is_accepted_by_it(
    tmp_path: Path, source: Path, kind: str, version: str, gates: str
) -> None:
    res = podstore("import", source, "--kind", kind, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    extra = ("--feature-gates", gates) if gates else ()
    res = podstore(
        "export", out, "--kind", kind, "--kubelet-version", version, *extra, "--allow-loss",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    gate_map = {"PodLevelResourceManagers": bool(gates)}
    release = parse_release(version)
    v = judge_file(out, release, gate_map, kind)
    assert v.verdict == "accept"
    assert v.read_as == written_format(kind, release, gate_map)
