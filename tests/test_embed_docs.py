"""docs/api.md's asyncio examples run as written, and the sections the embedding contract
names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from podstore import PodStore

API = Path(__file__).parent.parent / "docs" / "api.md"


def _section(title: str) -> str:
    text = API.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"docs/api.md has no section {title!r}"
    return match.group(1)


def test_the_embedding_sections_exist() -> None:
    fork = _section("Threads, processes and fork")
    for needle in ("register_at_fork", "/proc/locks", "transaction()", "MAX_IDLE"):
        assert needle in fork, needle
    assert "AsyncPodStore" in _section("asyncio")


def test_asyncio_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section("asyncio"), flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md#asyncio[{i}]", "exec"), {"__name__": "__docs__"})
    with PodStore.open(tmp_path / "node.db", readonly=True) as store:
        assert store.pods() == {"pod-b", "pod-d"}
