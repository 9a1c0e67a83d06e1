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
