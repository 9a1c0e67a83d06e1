"""Every command of the ``podstore`` group (subcommands of groups included) is documented."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness.cli import commands

from podstore.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def documentation() -> str:
    texts = [(ROOT / "README.md").read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(texts)


ALL = list(commands(cli))


def test_the_walk_finds_the_commands() -> None:
    assert {
        "podstore pods",
        "podstore get",
        "podstore devices",
        "podstore owners",
        "podstore run-options",
        "podstore history",
        "podstore sql",
        "podstore migrate upgrade",
        "podstore migrate downgrade",
        "podstore migrate current",
        "podstore migrate history",
    } <= set(ALL)


@pytest.mark.parametrize("command", ALL)
def test_command_is_documented(command: str) -> None:
    text = documentation()
    # As written in a command table or an example: the name followed by a space, a backtick
    # or the end of the line (so "podstore verify" is not satisfied by "verify-checkpoint").
    assert any(f"{command}{after}" in text for after in (" ", "`", "\n")), command


def test_readme_main_job_shows_the_workflow() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (
        "pip install -e . && podstore import examples/kubelet_internal_checkpoint "
        "&& podstore pods && podstore devices"
    ) in readme


def test_readme_main_job_runs_on_a_fresh_directory(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "kubelet_internal_checkpoint", tmp_path / "cp")
    installed = Path(sys.executable).parent / "podstore"
    command = (
        [str(installed)]
        if installed.exists()
        else [sys.executable, "-c", "from podstore.cli import main; main()"]
    )
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    outputs = []
    for args in (["import", "cp"], ["pods"], ["devices"]):
        proc = subprocess.run(
            [*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert (tmp_path / "podstore.db").exists()
    pods = outputs[1].splitlines()
    assert pods[0].split()[0] == "POD_UID"
    assert len(pods) == 4  # the example holds 3 pods
    assert "fpga-port-5" in outputs[2]  # registered, held by nobody
