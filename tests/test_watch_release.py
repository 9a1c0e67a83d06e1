"""``podstore watch --kubelet-version``: a real watch subprocess exports what that kubelet
release would do with each followed file, and judges a file again when kubelet rewrites it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.nodegen import Node, replace_file
from harness.watch_support import podstore_command
from test_watch_node import NodeWatch

from podstore.checkpoint import FILE_NAMES

VECTORS = Path(__file__).parent / "vectors" / "node"
_GAUGE = re.compile(
    r'^podstore_kubelet_release_(refused|drops)\{kind="(\w+)",kubelet_version="([^"]+)"\} (\S+)$',
    re.M,
)


def gauges(w: NodeWatch) -> dict[tuple[str, str, str], float]:
    try:
        text = w.textfile.read_text()
    except FileNotFoundError:
        return {}
    return {(m[1], m[2], m[3]): float(m[4]) for m in _GAUGE.finditer(text)}


def expected(kubelet: Path, release_text: str) -> dict[tuple[str, str, str], float]:
    from podstore.checkpoint.releases import parse_release
    from podstore.checkpoint.verdict import judge_file

    release = parse_release(release_text)
    out = {}
    for kind, name in FILE_NAMES.items():
        if not (kubelet / name).exists():
            continue
        v = judge_file(kubelet / name, release, {}, kind=kind)
        out[("refused", kind, str(release))] = 1.0 if v.verdict == "refuse" else 0.0
        out[("drops", kind, str(release))] = float(len(v.drops))
    return out


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    started: list[NodeWatch] = []

    def go(node: Node, **kw: Any) -> NodeWatch:
        w = NodeWatch(tmp_path, node, **kw)
        started.append(w)
        return w

    yield go
    for w in started:
        w.kill()


def test_verdicts_follow_the_files(start: Any) -> None:
    w = start(Node(4), extra=("--kubelet-version", "1.30"))
    w.started()
    want = expected(w.kubelet, "1.30")
    # The node's DRA file is in the data format 1.31 introduced: 1.30 refuses it.
    assert want[("refused", "dra", "1.30")] == 1.0
    w.wait(lambda: gauges(w) == want, f"the verdicts {want}")
    # kubelet 1.30 rewrites the DRA file in its own format: refused no more.
    replace_file(
        w.kubelet / FILE_NAMES["dra"], (VECTORS / "dra-v1-classic-single.json").read_bytes()
    )
    want = expected(w.kubelet, "1.30")
    assert want[("refused", "dra", "1.30")] == 0.0
    w.wait(lambda: gauges(w) == want, f"the verdicts after the rewrite {want}")
    # A CPU file whose pod-level sets only a 1.36+ release reads: 1.30 drops them.
    v4 = (VECTORS / "cpu-v4-embedded-v2-pod-entries.json").read_bytes()
    replace_file(w.kubelet / FILE_NAMES["cpu"], v4)
    want = expected(w.kubelet, "1.30")
    assert want[("drops", "cpu", "1.30")] >= 1.0
    w.wait(lambda: gauges(w) == want, f"the verdicts after the CPU rewrite {want}")
    assert w.stop() == 0, w.log()


def test_without_a_release_there_are_no_verdict_series(start: Any) -> None:
    w = start(Node(2))
    w.started()
    assert "podstore_kubelet_release" not in w.textfile.read_text()
    assert w.stop() == 0


def test_an_unknown_release_is_a_usage_error(tmp_path: Path) -> None:
    run = subprocess.run(
        [*podstore_command(), "--db", str(tmp_path / "s.db"), "watch", "--once",
         "--kubelet-dir", str(tmp_path), "--kubelet-version", "1.17"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "1.18" in run.stderr
    assert not (tmp_path / "s.db").exists()
