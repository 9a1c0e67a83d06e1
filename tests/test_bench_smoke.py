"""``python -m bench --smoke``: every section still runs, end to end, at toy sizes.

CI runs the whole suite, not the whole bench (a full run takes about 20 minutes on the 2-core
box); this keeps the bench from rotting between full runs. Its figures mean nothing and are
written to a scratch directory; what is checked is that every section answered, the contenders
agreed, and the results name the commit they measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import runner, sections

REPO = Path(__file__).resolve().parent.parent
assert runner  # registers the per-size sections


def test_smoke_runs_every_section_and_names_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((out / "latest.json").read_text(encoding="utf-8"))
    meta = results["meta"]
    sections.load_extensions()
    # As sets: registration order follows import order, which other tests of this worker move.
    assert meta["smoke"] is True and sorted(meta["sections"]) == sorted(sections.SECTIONS)
    once = {n for n, s in sections.SECTIONS.items() if not s.per_size} - {"fixture"}
    assert set(results["sections"]) == once and all(results["sections"].values())
    (size,) = results["sizes"]
    assert not {"import", "insert", "insert_normal", "pod_devices", "export"} - set(size["ops"])
    assert results["fixture"]["entries"] == 2_000
    commit = meta["machine"]["git_commit"]
    md = (out / "latest.md").read_text(encoding="utf-8")
    assert commit and f"at commit {commit}" in md
