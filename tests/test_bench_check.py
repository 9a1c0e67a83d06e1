"""``python -m bench --check``: committed bench results must name the source tree they measured.

CI runs the check itself on the committed results (.ci/run); this test pins that it tells a
matching tree from another one, on results written to a scratch directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.digest import source_digest

REPO = Path(__file__).resolve().parent.parent


def _check(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--check", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _results(out: Path, digest: str) -> None:
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps({"meta": {"source_digest": digest}}))
    (out / "latest.md").write_text(f"- source digest `{digest}` (podstore/ and migrations/)\n")


def test_check_accepts_results_of_this_tree_and_refuses_others(tmp_path: Path) -> None:
    digest = source_digest(str(REPO))
    _results(tmp_path / "same", digest)
    done = _check(tmp_path / "same")
    assert done.returncode == 0, done.stderr
    _results(tmp_path / "other", "0" * 64)
    done = _check(tmp_path / "other")
    assert done.returncode == 1
    assert "another tree" in done.stderr and "python -m bench" in done.stderr
    done = _check(tmp_path / "missing")
    assert done.returncode == 1


def test_digest_follows_the_package_source(tmp_path: Path) -> None:
    for tree in ("podstore", "migrations"):
        (tmp_path / tree).mkdir()
        (tmp_path / tree / "a.py").write_text("x = 1\n")
    first = source_digest(str(tmp_path))
    (tmp_path / "podstore" / "__pycache__").mkdir()
    (tmp_path / "podstore" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert source_digest(str(tmp_path)) == first  # caches are not source
    (tmp_path / "migrations" / "a.py").write_text("x = 2\n")
    assert source_digest(str(tmp_path)) != first
