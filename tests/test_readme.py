"""The README's Python quick start runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from podstore import PodStore
from podstore.checkpoint import read_checkpoint

README = Path(__file__).parent.parent / "README.md"


def test_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python block"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert os.stat("node.db").st_mode & 0o777 == 0o600
    with PodStore.open("node.db", readonly=True) as store:
        assert store.pods() == {"pod-uid-2"}
    assert [e.pod_uid for e in read_checkpoint("kubelet_internal_checkpoint").entries] == []


def test_the_whole_node_section_runs_as_written(tmp_path: Path) -> None:
    """The README's import-node and topology commands, on the example node, from a copy of
    the examples directory (as on a fresh clone)."""
    import shlex
    import shutil
    import subprocess

    from harness.watch_support import podstore_command

    text = README.read_text()
    section = text[text.index("## The whole node") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    shutil.copytree(README.parent / "examples", tmp_path / "examples")
    outputs = []
    for line in block[1].strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "podstore"
        res = subprocess.run(
            [*podstore_command(), *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        outputs.append(res.stdout)
    assert "absent" not in outputs[0]  # every file of the example is there
    misaligned = outputs[-1].splitlines()[1:]
    assert len(misaligned) == 1 and "inference-7d9f" in misaligned[0]
