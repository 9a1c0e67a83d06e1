"""``podstore verify-checkpoint`` on files of every kind, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NODE = Path(__file__).parent / "vectors" / "node"
DEVICES = Path(__file__).parent / "vectors" / "v2-small.json"


def _verify(*files: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from podstore.cli import main; main()",
            "verify-checkpoint",
            "-o",
            "json",
            *map(str, files),
        ],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_kind_is_verified_and_named(tmp_path: Path) -> None:
    files = [
        DEVICES,
        NODE / "cpu-real-aws-sriov.json",
        NODE / "memory-v3-compact.json",
        NODE / "memory-v1-zero-checksum.json",
        NODE / "dra-data-entries-two-claims.json",
        NODE / "dra-v1-classic-single.json",
    ]
    res = _verify(*files, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    got = [
        (r["kind"], r["status"], r["format"], r["entries"], r["stored"], r["computed"])
        for r in rows
    ]
    assert got == [
        ("devices", "OK", "v2", 11, 1616683350, 1616683350),
        ("cpu", "OK", "v2", 2, 4076905443, 4076905443),
        ("memory", "OK", "v3", 1, 1849615440, 1849615440),
        ("memory", "OK", "v1", 1, 0, None),  # a stored 0, accepted unverified
        ("dra", "OK", "data", 2, 3633532417, 3633532417),
        ("dra", "OK", "v1", 1, 113577689, 113577689),
    ]


def test_failures_keep_the_kind_and_exit_1(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_text('{"foo": 1}')
    res = _verify(
        NODE / "dra-data-corrupt.json",
        NODE / "cpu-v4-bad-entry.json",
        junk,
        cwd=tmp_path,
    )
    assert res.returncode == 1
    rows = json.loads(res.stdout)
    assert [(r["kind"], r["status"]) for r in rows] == [
        ("dra", "MISMATCH"),
        ("cpu", "UNREADABLE"),
        (None, "UNREADABLE"),
    ]
    assert (rows[0]["stored"], rows[0]["computed"]) == (2930258365, 3633532417)
    assert 'invalid cpuset "asd"' in rows[1]["error"]
    assert "not a kubelet checkpoint of any known kind" in rows[2]["error"]
    assert "Traceback" not in res.stderr


def test_table_output_has_a_kind_column(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "from podstore.cli import main; main()",
            "verify-checkpoint",
            str(NODE / "cpu-v4-compact.json"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    header, row = res.stdout.splitlines()[:2]
    assert header.split()[:3] == ["FILE", "KIND", "STATUS"]
    assert row.split()[1:4] == ["cpu", "OK", "v4"]
