"""``podstore export`` in an older format at node scale (1,000 pods): CPU time against the
plain export of the same store, generous relative bound (the conversion is one pass over the
state; both are dominated by reading the store and writing the file)."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest
from harness.release_writers import as_release

from bench.nodefiles import cpu_state, memory_state
from podstore import PodStore
from podstore.checkpoint import read_cpu_state, read_memory_state

PODS = 1_000
RUNS = 3
#: The older format may cost this much more CPU than the plain export, plus a fixed slack.
RATIO = 2.0
SLACK_S = 0.3


def cpu_seconds(*args: str | Path, cwd: Path) -> float:
    """The least CPU time (user + system) of RUNS runs of ``podstore ARGS``."""
    best = float("inf")
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = subprocess.run(
            ["podstore", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert res.returncode == 0, res.stderr
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, used)
    return best


@pytest.fixture(scope="module")
def node_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scale")
    with PodStore.open(root / "podstore.db") as store:
        store.set_cpu_state(cpu_state(PODS, 4))
        store.set_memory_state(memory_state(PODS, 3))
    return root


@pytest.mark.parametrize(("kind", "fmt"), [("cpu", "v2"), ("cpu", "v3"), ("memory", "v1")])
def test_an_older_format_costs_about_what_the_plain_export_does(
    node_store: Path, kind: str, fmt: str
) -> None:
    plain = cpu_seconds("export", node_store / "plain", "--kind", kind, cwd=node_store)
    older = cpu_seconds(
        "export", node_store / "older", "--kind", kind, *as_release(kind, fmt), "--allow-loss",
        cwd=node_store,
    )  # fmt: skip
    reader = read_cpu_state if kind == "cpu" else read_memory_state
    back = reader(node_store / "older")
    assert f"v{back.version}" == fmt and back.verified
    assert len(back.entries or {}) == PODS
    assert older < RATIO * plain + SLACK_S, f"{kind} {fmt}: {older:.2f} s CPU, plain {plain:.2f} s"
