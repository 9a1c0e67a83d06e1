"""``python -m bench --check``: committed bench results must be a whole run of this tree.

CI runs the check itself on the committed results (.ci/run); these tests pin what it accepts
and refuses, on results written to a scratch directory: the digest covers the package, its
migrations and the bench's own code (not the results); a run that was ``--quick`` or
``--only``, over other sizes, without some section's figures, or a file holding a digest and
nothing else is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import digest, runner, sections
from bench.__main__ import DEFAULT_SIZES
from bench.digest import source_digest

REPO = Path(__file__).resolve().parent.parent

assert runner  # registers the per-size sections and the fixture
sections.load_extensions()
SECTIONS = {name: s.per_size for name, s in sections.SECTIONS.items()}
GLOBAL = [name for name, per_size in SECTIONS.items() if not per_size]


def _check(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--check", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _whole_run(digest_: str) -> tuple[dict[str, Any], str]:
    """The shape of a whole run's latest.json and latest.md (figures stand-ins)."""
    results: dict[str, Any] = {
        "meta": {
            "source_digest": digest_,
            "quick": False,
            "only": None,
            "sections": list(SECTIONS),
        },
        "sizes": [{"pods": n, "ops": {"insert": {}}} for n in DEFAULT_SIZES],
        "fixture": {"entries": 100_000},
        "sections": {
            n: {"figure": 1.0} for n, per in SECTIONS.items() if not per and n != "fixture"
        },
        "targets": [
            {"name": "durable insert ≤ 2.0× raw fsync @ 100 pods", "verdict": "PASS"},
            {"name": "import_checkpoint ≤ 1.0× kubelet-style load @ 100 pods", "verdict": "MISS"},
        ],
    }
    md = (
        "| target | verdict |\n|---|---|\n"
        + "".join(f"| {t['name']} | {t['verdict']} |\n" for t in results["targets"])
        + f"- source digest `{digest_}` (podstore/, migrations/, bench/)\n"
    )
    return results, md


def _write(out: Path, results: dict[str, Any], md: str) -> Path:
    out.mkdir()
    (out / "latest.json").write_text(json.dumps(results), encoding="utf-8")
    (out / "latest.md").write_text(md, encoding="utf-8")
    return out


def test_check_accepts_a_whole_run_of_this_tree(tmp_path: Path) -> None:
    results, md = _whole_run(source_digest(str(REPO)))
    done = _check(_write(tmp_path / "whole", results, md))
    assert done.returncode == 0, done.stderr
    assert "whole run of this tree" in done.stdout


def _quick(r: dict[str, Any], md: str) -> str:
    r["meta"]["quick"] = True
    return md


def _only(r: dict[str, Any], md: str) -> str:
    r["meta"]["only"] = ["reads"]
    r["meta"]["sections"] = ["reads"]
    return md


def _fewer_sizes(r: dict[str, Any], md: str) -> str:
    r["sizes"] = r["sizes"][:2]
    return md


def _no_meta_sections(r: dict[str, Any], md: str) -> str:
    del r["meta"]["sections"]  # results written before the bench recorded them
    return md


def _empty_global_section(r: dict[str, Any], md: str) -> str:
    name = next(iter(r["sections"]))
    r["sections"][name] = {}
    return md


def _no_fixture(r: dict[str, Any], md: str) -> str:
    del r["fixture"]
    return md


def _md_without_targets(r: dict[str, Any], md: str) -> str:
    return "".join(line for line in md.splitlines(True) if "source digest" in line)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_quick, "--quick"),
        (_only, "--only"),
        (_fewer_sizes, "sizes measured"),
        (_no_meta_sections, "sections run"),
        (_empty_global_section, "no figures of"),
        (_no_fixture, "no figures of fixture"),
        (_md_without_targets, "latest.md lacks 2"),
    ],
    ids=lambda x: x.__name__.strip("_") if callable(x) else "",
)
def test_check_refuses_a_partial_run(tmp_path: Path, change: Any, reason: str) -> None:
    results, md = _whole_run(source_digest(str(REPO)))
    md = change(results, md)
    done = _check(_write(tmp_path / "partial", results, md))
    assert done.returncode == 1, done.stdout
    assert "not a whole run" in done.stderr and reason in done.stderr, done.stderr
    assert "python -m bench" in done.stderr


def test_check_refuses_a_file_with_nothing_but_a_digest(tmp_path: Path) -> None:
    want = source_digest(str(REPO))
    out = _write(
        tmp_path / "bare",
        {"meta": {"source_digest": want}},
        f"- source digest `{want}` (podstore/, migrations/, bench/)\n",
    )
    done = _check(out)
    assert done.returncode == 1
    assert "not a whole run" in done.stderr
    out = _write(tmp_path / "barer", {}, f"- source digest `{want}`\n")
    assert _check(out).returncode == 1


def test_check_refuses_results_of_another_tree_and_missing_results(tmp_path: Path) -> None:
    results, md = _whole_run("0" * 64)
    done = _check(_write(tmp_path / "other", results, md))
    assert done.returncode == 1
    assert "another tree" in done.stderr and "python -m bench" in done.stderr
    assert _check(tmp_path / "missing").returncode == 1


def _tree(root: Path) -> None:
    for tree in ("podstore", "migrations", "bench"):
        (root / tree).mkdir()
        (root / tree / "a.py").write_text("x = 1\n")


def test_digest_covers_the_package_its_migrations_and_the_bench_code(tmp_path: Path) -> None:
    _tree(tmp_path)
    first = source_digest(str(tmp_path))
    for tree in ("podstore", "migrations", "bench"):
        (tmp_path / tree / "a.py").write_text("x = 2\n")
        changed = source_digest(str(tmp_path))
        assert changed != first, tree
        (tmp_path / tree / "a.py").write_text("x = 1\n")
        assert source_digest(str(tmp_path)) == first
    (tmp_path / "bench" / "new_section.py").write_text("")
    assert source_digest(str(tmp_path)) != first  # a new bench module is other bench code


def test_digest_leaves_out_caches_and_the_results(tmp_path: Path) -> None:
    _tree(tmp_path)
    first = source_digest(str(tmp_path))
    (tmp_path / "podstore" / "__pycache__").mkdir()
    (tmp_path / "podstore" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "bench" / "results").mkdir()
    (tmp_path / "bench" / "results" / "latest.json").write_text("{}")
    (tmp_path / "bench" / "results" / "latest.md").write_text("")
    assert source_digest(str(tmp_path)) == first
    assert digest.TREES == ("podstore", "migrations", "bench")


def test_a_real_quick_partial_run_records_itself_and_is_refused(tmp_path: Path) -> None:
    """``python -m bench --quick --only reads --sizes 100`` (about 2 s) writes meta.sections;
    the check refuses what it wrote, naming each way it is partial."""
    pytest.importorskip("tabulate", reason="python -m bench prints its tables with tabulate")
    out = tmp_path / "quick"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "reads", "--sizes", "100",
         "--plot", "", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "latest.json").read_text(encoding="utf-8"))["meta"]
    assert meta["sections"] == ["reads"] and meta["quick"] is True and meta["only"] == ["reads"]
    assert meta["source_digest"] == source_digest(str(REPO))
    done = _check(out)
    assert done.returncode == 1
    for reason in ("--quick", "--only", "sections run", "sizes measured", "no figures of"):
        assert reason in done.stderr, done.stderr
