"""One rule for the exit status of every command (README "Exit codes"): 0 success; 1 a failed
check, a refusal or an error; 2 bad usage and a missing optional extra. The test walks the
command group, so a new command must be added to the tables below (each with the way it fails
with 1) before it passes.

Missing extras are made real: the child's ``PYTHONPATH`` starts with a directory whose
``watchdog``, ``prometheus_client`` and ``psycopg`` packages raise ImportError, as an
interpreter without ``podstore[watch]`` / ``podstore[fleet]`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from harness.cli import ENTRY, commands, subcommand

from podstore import PodStore
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file
from podstore.cli import cli, main

ALL = list(commands(cli))
#: A URL no server answers (port 1 on loopback refuses at once).
NOWHERE = "postgresql://podstore@127.0.0.1:1/fleet"

# How each command fails with exit 1 ({store}: an existing store, {missing}: a store that
# does not exist, {cp}: a checkpoint file that exists, {bad}: a corrupt checkpoint file,
# {kubelet}: a kubelet directory whose device checkpoint is corrupt).
# A group has no failure of its own (its commands are listed); NO_FAILURE marks a command
# that has none (tested to succeed even where others fail).
NO_FAILURE = ["--db", "{store}", "--readonly", "migrate", "history"]
FAILS: dict[str, list[str] | None] = {
    "podstore fleet": None,
    "podstore migrate": None,
    "podstore status": ["--db", "{missing}", "status"],
    "podstore import": ["--db", "{store}", "import", "{bad}"],
    "podstore export": ["--db", "{missing}", "export", "{out}"],
    "podstore verify-checkpoint": ["verify-checkpoint", "{bad}"],
    "podstore preflight": ["preflight", "{kubelet}", "--kubelet-version", "1.37"],
    "podstore pods": ["--db", "{missing}", "pods"],
    "podstore get": ["--db", "{store}", "get", "no-such-pod"],
    "podstore devices": ["--db", "{missing}", "devices"],
    "podstore owners": ["--db", "{missing}", "owners", "gpu-0"],
    "podstore run-options": ["--db", "{store}", "run-options", "no-such-pod", "main"],
    "podstore history": ["--db", "{missing}", "history"],
    "podstore usage": ["--db", "{missing}", "usage"],
    "podstore sql": ["--db", "{store}", "sql", "DELETE FROM pods"],
    "podstore verify": ["--db", "{missing}", "verify"],
    "podstore reset-identity": ["--db", "{store}", "reset-identity"],  # without --yes
    "podstore prune": ["--db", "{store}", "--readonly", "prune", "--keep", "1d"],
    "podstore import-node": ["--db", "{store}", "--readonly", "import-node", "{missing}"],
    "podstore topology": ["--db", "{missing}", "topology"],
    "podstore migrate upgrade": ["--db", "{store}", "--readonly", "migrate", "upgrade"],
    "podstore migrate downgrade": ["--db", "{store}", "migrate", "downgrade", "base"],
    "podstore migrate current": ["--db", "{missing}", "migrate", "current"],
    "podstore migrate history": NO_FAILURE,
    "podstore watch": ["--db", "{store}", "watch", "--once", "{bad}"],
    "podstore metrics": ["--db", "{missing}", "metrics"],
    "podstore ship": ["--db", "{store}", "ship", "--to", NOWHERE],
    "podstore fleet init": ["fleet", "init", "--url", NOWHERE],
    "podstore fleet nodes": ["fleet", "nodes", "--url", NOWHERE],
    "podstore fleet owners": ["fleet", "owners", "gpu-0", "--url", NOWHERE],
    "podstore fleet sql": ["fleet", "sql", "--url", NOWHERE, "SELECT 1"],
    "podstore fleet verify": ["fleet", "verify", "--url", NOWHERE],
    "podstore fleet usage": ["fleet", "usage", "--url", NOWHERE],
    "podstore fleet grant-node": ["fleet", "grant-node", "n1", "--url", NOWHERE],
    "podstore fleet grant-reader": ["fleet", "grant-reader", "r1", "--url", NOWHERE],
    "podstore fleet rename-node": ["fleet", "rename-node", "a", "b", "--url", NOWHERE],
    "podstore fleet retire": ["fleet", "retire", "--node", "a", "--url", NOWHERE],
}

# The commands that need an optional extra, the arguments that reach that need, and the
# extra named.
EXTRAS: dict[str, tuple[list[str], str]] = {
    "podstore watch": (["--db", "{store}", "watch", "{cp}"], "watch"),
    "podstore watch --once --metrics-addr": (
        ["--db", "{store}", "watch", "--once", "{cp}", "--metrics-addr", "127.0.0.1:0"],
        "watch",
    ),
    "podstore watch --once --textfile": (
        ["--db", "{store}", "watch", "--once", "{cp}", "--textfile", "{out}"],
        "watch",
    ),
    "podstore watch --once --cri-socket": (
        ["--db", "{store}", "watch", "--once", "{cp}", "--cri-socket", "{out}"],
        "cri",
    ),
    "podstore watch --once --ship-to-file": (
        ["--db", "{store}", "watch", "--once", "{cp}", "--ship-to-file", "{out}"],
        "fleet",
    ),
    "podstore metrics": (["--db", "{store}", "metrics"], "watch"),
    "podstore ship": (["--db", "{store}", "ship", "--to", NOWHERE], "fleet"),
    **{
        path: ([*path.split()[1:], "--url", NOWHERE, *args], "fleet")
        for path, args in {
            "podstore fleet init": [],
            "podstore fleet nodes": [],
            "podstore fleet owners": ["gpu-0"],
            "podstore fleet sql": ["SELECT 1"],
            "podstore fleet verify": [],
            "podstore fleet usage": [],
            "podstore fleet grant-node": ["n1"],
            "podstore fleet grant-reader": ["r1"],
            "podstore fleet rename-node": ["a", "b"],
            "podstore fleet retire": ["--node", "a"],
        }.items()
    },
}


@pytest.fixture
def files(tmp_path: Path) -> Iterator[dict[str, str]]:
    store = tmp_path / "store.db"
    with PodStore.open(store) as s:
        s.insert("pod-a", "main", "example.com/gpu", {0: ["gpu-0"]}, None)
    cp = tmp_path / "cp"
    write_checkpoint_file(cp, dumps_checkpoint([], {}))
    bad = tmp_path / "bad"
    bad.write_bytes(b'{"Data":')
    kubelet = tmp_path / "kubelet"
    (kubelet / "device-plugins").mkdir(parents=True)
    (kubelet / "device-plugins" / "kubelet_internal_checkpoint").write_bytes(b'{"Data":')
    yield {
        "kubelet": str(kubelet),
        "store": str(store),
        "missing": str(tmp_path / "none" / "missing.db"),
        "cp": str(cp),
        "bad": str(bad),
        "out": str(tmp_path / "out"),
    }


def fill(args: list[str], files: dict[str, str]) -> list[str]:
    return [a.format(**files) for a in args]


def run_main(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


def test_the_tables_cover_every_command() -> None:
    assert set(FAILS) == set(ALL)
    assert {k.split(" --")[0] for k in EXTRAS} == {
        "podstore watch",
        "podstore metrics",
        "podstore ship",
        *(c for c in ALL if c.startswith("podstore fleet ")),
    }


@pytest.mark.parametrize("path", ALL)
def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], path: str) -> None:
    code, _out, err = run_main(capsys, [*path.split()[1:], "--no-such-option"])
    assert code == 2, err
    assert "No such option" in err


@pytest.mark.parametrize(
    "path", [p for p, args in FAILS.items() if args is not None and args is not NO_FAILURE]
)
def test_a_failure_exits_1_and_says_why(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], path: str
) -> None:
    args = FAILS[path]
    assert args is not None
    code, out, err = run_main(capsys, fill(args, files))
    assert code == 1, err
    assert "Traceback" not in err
    assert err.strip() or out.strip()


def test_migrate_history_has_no_failure_but_never_writes(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    """``migrate history`` lists the known revisions from the package (it opens no store),
    so it has no exit-1 path; under --readonly it still succeeds."""
    assert FAILS["podstore migrate history"] is NO_FAILURE
    code, out, _err = run_main(capsys, fill(NO_FAILURE, files))
    assert code == 0 and out


@pytest.fixture
def no_extras(tmp_path: Path) -> dict[str, str]:
    """A child environment in which watchdog, prometheus_client, psycopg and grpc fail to
    import."""
    blocked = tmp_path / "blocked"
    for name in ("watchdog", "prometheus_client", "psycopg", "grpc"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed here (a test blocks it)')\n"
        )
    path = os.pathsep.join([str(blocked), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.parametrize("case", list(EXTRAS))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_missing_extra_exits_2_everywhere(
    files: dict[str, str], no_extras: dict[str, str], case: str, fmt: str
) -> None:
    args, extra = EXTRAS[case]
    run = subprocess.run(
        [*ENTRY, "--log-format", fmt, *fill(args, files)],
        capture_output=True, text=True, timeout=120, env=no_extras,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    hint = f"install podstore[{extra}]"
    if fmt == "json":
        obj = json.loads(line)
        assert obj["level"] == "error" and hint in obj["message"] and obj["extra"] == extra
    else:
        assert line.startswith("podstore: error: ") and hint in line, line


def test_the_node_commands_need_no_extra(files: dict[str, str], no_extras: dict[str, str]) -> None:
    for args in (
        ["--db", "{store}", "pods"],
        ["--db", "{store}", "watch", "--once", "{cp}"],
        ["--db", "{store}", "prune", "--keep", "30d"],
    ):
        run = subprocess.run(
            [*ENTRY, *fill(args, files)], capture_output=True, text=True, timeout=120,
            env=no_extras,
        )  # fmt: skip
        assert run.returncode == 0, (args, run.stderr)


def test_groups_are_groups() -> None:
    for path, args in FAILS.items():
        command: click.Command = cli
        for name in path.split()[1:]:
            assert isinstance(command, click.Group)
            command = subcommand(command, name)
        assert (args is None) == isinstance(command, click.Group), path
