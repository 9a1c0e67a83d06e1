"""The install the README and docs/deploy.md show, for real: a wheel built from exactly the
files deploy/Containerfile's build stage copies, with the build stage's own command; installed
with the image's extras into a fresh venv by the final stage's own command; then podstore run from
that venv (--help, import, pods, status, metrics, migrate current) on the example checkpoint.
The Containerfile itself is parsed and checked: no container engine runs here to build it.

One module-scoped build and install (about 20 s on the 2-core machine): the wheel, the venv
and pip's temporary files all live in the test's temporary directory, and pip caches nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podstore.fleet import migrate as fleet_migrate
from podstore.sqlite import migrate as node_migrate

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
EXAMPLE = ROOT / "examples" / "kubelet_internal_checkpoint"
KEYWORDS = {"ARG", "FROM", "WORKDIR", "COPY", "RUN", "ENV", "USER", "ENTRYPOINT", "CMD", "LABEL"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM it belongs to (-1: before the first)


def parse_containerfile(text: str) -> list[Instruction]:
    """Instructions with their continuation lines joined and comments dropped; only the
    keywords this project uses are accepted."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        line = pending + line
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        keyword, _, args = line.partition(" ")
        assert keyword in KEYWORDS, f"unknown instruction {keyword!r}"
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, args.strip(), stage))
    assert not pending, "a continuation line at the end"
    return out


def instructions() -> list[Instruction]:
    return parse_containerfile(CONTAINERFILE.read_text())


def only(keyword: str, stage: int) -> list[str]:
    return [i.args for i in instructions() if i.keyword == keyword and i.stage == stage]


def test_containerfile_shape() -> None:
    ins = instructions()
    assert ins[0].keyword == "ARG" and ins[0].args.startswith("PYTHON_IMAGE=")
    froms = [i.args for i in ins if i.keyword == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    # The build stage copies the sources that exist, relative to the context (the top).
    for args in only("COPY", 0):
        *sources, _dest = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    # The final stage: the wheel only through a bind mount from the build stage, a venv at
    # /opt/podstore, a non-root numeric user, the venv's podstore as an exec-form entrypoint.
    assert only("COPY", 1) == []
    (install,) = [r for r in only("RUN", 1) if "pip install" in r]
    assert install.startswith("--mount=type=bind,from=build,source=/dist,target=/dist ")
    assert "python -m venv /opt/podstore" in install
    (user,) = only("USER", 1)
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and int(gid) != 0
    (entrypoint,) = only("ENTRYPOINT", 1)
    assert json.loads(entrypoint) == ["/opt/podstore/bin/podstore"]
    assert json.loads(only("CMD", 1)[0]) == ["--help"]
    assert any("PYTHONDONTWRITEBYTECODE=1" in e for e in only("ENV", 1))


@dataclass
class Installed:
    wheel: Path
    venv: Path
    env: dict[str, str]

    def podstore(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "podstore"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env=self.env,
        )


def shell(command: str, cwd: Path, env: dict[str, str]) -> None:
    run = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )
    assert run.returncode == 0, f"{command}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("wheel")
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODSTORE_", "VIRTUAL_ENV"))}
    # Nothing of pip's outside the test's directory: no cache, temporary files here.
    env.update(HOME=str(home), TMPDIR=str(tmp), XDG_CACHE_HOME=str(home / ".cache"),
               PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")  # fmt: skip
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p != str(Path(sys.executable).parent)
    )

    # The build stage: its COPYs into a context of their own, then its RUN, with the build
    # stage's interpreter being this one.
    context = tmp / "src"
    context.mkdir()
    for args in only("COPY", 0):
        *sources, _dest = args.split()
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(
                    src, context / source, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                )  # fmt: skip
            else:
                shutil.copy(src, context / source)
    dist = tmp / "dist"
    (build,) = only("RUN", 0)
    shell(build.replace("/dist", str(dist)).replace("python ", f"{sys.executable} ", 1),
          context, env)  # fmt: skip
    (wheel,) = dist.glob("podstore-*.whl")

    # The final stage's install, in a venv of the base interpreter (not this one's venv).
    venv = tmp / "opt" / "podstore"
    (install,) = [r for r in only("RUN", 1) if "pip install" in r]
    command = install.split(" ", 1)[1]  # after the --mount flag
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable
    command = command.replace("/opt/podstore", str(venv)).replace("/dist", str(dist))
    command = command.replace("python -m venv", f"{base} -m venv", 1)
    shell(command, tmp, env)
    yield Installed(wheel, venv, env)


def tracked_package_files() -> set[str]:
    """Every file of the package as the wheel must name it (migrations/ through the
    podstore/migrations symlink), from git when this is a checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "podstore", "migrations"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=True,
        ).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = set()
    for name in filter(None, listed):
        if name == "podstore/migrations":  # the symlink itself
            continue
        out.add(name if name.startswith("podstore/") else "podstore/" + name)
    return out


def test_the_wheel_holds_every_package_file(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = tracked_package_files() - names
    assert not missing, f"not in the wheel (package-data in pyproject.toml?): {sorted(missing)}"
    for required in (
        "podstore/py.typed",
        "podstore/migrations/script.py.mako",
        "podstore/fleet/migrations/script.py.mako",
        "podstore/deviceplugin/api_pb2.pyi",
        "podstore/deviceplugin/api.proto",
    ):
        assert required in names
    assert any(n.startswith("podstore/migrations/versions/0001") for n in names)
    assert any(n.startswith("podstore/fleet/migrations/versions/") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "podstore = podstore.cli:main"
        in zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    )


def test_the_installed_venv_runs_podstore(installed: Installed, tmp_path: Path) -> None:
    help_run = installed.podstore("--help", cwd=tmp_path)
    assert help_run.returncode == 0 and "watch" in help_run.stdout
    # The venv's own copy, not this checkout, with the image's extras (the CRI client's grpc
    # too) and both migration trees.
    probe = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c",
         "import json, podstore, prometheus_client, watchdog, psycopg, grpc\n"
         "from podstore.fleet import migrate as f\nfrom podstore.sqlite import migrate as n\n"
         "print(json.dumps([podstore.__file__, n.head_revision(), f.head_revision()]))"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=installed.env,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    location, node_head, fleet_head = json.loads(probe.stdout)
    assert Path(location).is_relative_to(installed.venv)
    assert node_head == node_migrate.head_revision()
    assert fleet_head == fleet_migrate.head_revision()

    db = tmp_path / "node" / "podstore.db"
    imported = installed.podstore("--db", str(db), "import", str(EXAMPLE), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    pods = installed.podstore("--db", str(db), "pods", "-o", "json", cwd=tmp_path)
    assert pods.returncode == 0, pods.stderr
    assert json.loads(pods.stdout)
    status = installed.podstore("--db", str(db), "status", "-o", "json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    current = installed.podstore("--db", str(db), "migrate", "current", cwd=tmp_path)
    assert current.returncode == 0 and node_migrate.head_revision() in current.stdout
    metrics = installed.podstore("--db", str(db), "metrics", cwd=tmp_path)
    assert metrics.returncode == 0, metrics.stderr
    assert "podstore_pods " in metrics.stdout
    assert "podstore_allocated_devices{" in metrics.stdout


def test_readme_install_lines_are_the_ones_tested(installed: Installed) -> None:
    """README's "Install" shows the wheel this module builds and installs, by name, with the
    build stage's flags; a clone's `pip install '.[watch,fleet]'` builds the same wheel."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in section.splitlines()]
    assert "pip install '.[watch,fleet]'" in lines
    (build,) = [line for line in lines if line.startswith("pip wheel ")]
    assert build.split()[2:] == ["--no-deps", "--wheel-dir", "dist", "."]
    (install,) = [line for line in lines if ".whl[" in line]
    assert install == (f"/opt/podstore/bin/pip install 'dist/{installed.wheel.name}[watch,fleet]'")
    assert "python3 -m venv /opt/podstore" in lines
