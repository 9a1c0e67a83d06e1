"""The systemd units for real, as far as this machine allows: ``systemd-analyze verify`` and
``security`` on them (in a private root where the venv's podstore exists), the watch unit's
choice of root without capabilities shown on a real root-only checkpoint, the ship unit's
command line shipping to a real PostgreSQL with the URL from an environment file, and the
watch unit's with the URL from its ``LoadCredential=`` file."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.deploy import DEPLOY, STORE_DIR, VENV_PODSTORE, unit
from harness.pgserver import PgServer, PgServerUnavailable
from harness.watch_support import podstore_command

from podstore import PodStore
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file

UNITS = ("podstore-watch.service", "podstore-ship.service", "podstore-ship.timer")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kubelet_internal_checkpoint"


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian: the systemd package)")
    return found


def unit_dirs() -> Path:
    for candidate in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        if (Path(candidate) / "sysinit.target").exists():
            return Path(candidate)
    pytest.skip("no systemd unit directory with sysinit.target to verify against")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A private root for ``--root``: the system's own units (the targets ours order
    against), ours in /etc/systemd/system, and an executable /opt/podstore/bin/podstore."""
    systemd_analyze()
    shutil.copytree(unit_dirs(), tmp_path / "usr/lib/systemd/system", symlinks=True)
    etc = tmp_path / "etc/systemd/system"
    etc.mkdir(parents=True)
    for name in UNITS:
        shutil.copy(DEPLOY / name, etc / name)
    stub = tmp_path / VENV_PODSTORE.lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return tmp_path


def verify(root: Path, *names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze(), "verify", "--man=no", f"--root={root}", *names],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_systemd_analyze_verify(root: Path) -> None:
    run = verify(root, *UNITS)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "" and run.stdout == ""


def test_verify_reports_a_broken_unit(root: Path) -> None:
    # What the check above would catch: a misspelt setting is only a warning for systemd,
    # which the test refuses; a missing executable is an error.
    path = root / "etc/systemd/system/podstore-watch.service"
    path.write_text(path.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict"))
    assert "Unknown key" in verify(root, "podstore-watch.service").stderr
    (root / VENV_PODSTORE.lstrip("/")).unlink()
    run = verify(root, "podstore-watch.service")
    assert run.returncode != 0 and "podstore" in run.stderr


@pytest.mark.parametrize("name", ["podstore-watch.service", "podstore-ship.service"])
def test_systemd_analyze_security(root: Path, name: str) -> None:
    run = subprocess.run(
        [systemd_analyze(), "security", "--offline=yes", f"--root={root}", "--threshold=20",
         "--no-pager", name],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert "Overall exposure level" in run.stdout


def test_security_threshold_has_teeth(root: Path) -> None:
    path = root / "etc/systemd/system/podstore-watch.service"
    text = path.read_text()
    for line in ("CapabilityBoundingSet=\n", "ProtectSystem=strict\n", "NoNewPrivileges=yes\n",
                 "SystemCallFilter=@system-service\n", "RestrictNamespaces=yes\n"):  # fmt: skip
        assert line in text
        text = text.replace(line, "")
    path.write_text(text)
    run = subprocess.run(
        [systemd_analyze(), "security", "--offline=yes", f"--root={root}", "--threshold=20",
         "--no-pager", "podstore-watch.service"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode != 0


# ---- root without capabilities ----------------------------------------------------------------


def no_caps() -> list[str]:
    """argv prefix: run as root with every capability gone (bounding, inheritable, ambient;
    root's exec then gets an empty permitted and effective set), as the unit's empty
    CapabilityBoundingSet= and the DaemonSet's drop: [ALL] run podstore."""
    if os.geteuid() != 0:
        pytest.skip("needs root: shows what uid 0 without capabilities can read")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def test_root_without_capabilities_reads_kubelets_files(tmp_path: Path) -> None:
    prefix = no_caps()
    status = subprocess.run(
        [*prefix, "grep", "^CapEff", "/proc/self/status"], capture_output=True, text=True
    )
    assert status.stdout.split() == ["CapEff:", "0000000000000000"]
    # kubelet's layout: root-only directories, the checkpoint root's own, mode 0600.
    kubelet = tmp_path / "kubelet"
    plugins = kubelet / "device-plugins"
    plugins.mkdir(parents=True)
    checkpoint = plugins / "kubelet_internal_checkpoint"
    shutil.copy(EXAMPLE, checkpoint)
    for path, mode in ((kubelet, 0o700), (plugins, 0o700), (checkpoint, 0o600)):
        os.chown(path, 0, 0)
        path.chmod(mode)
    db = tmp_path / "podstore" / "podstore.db"
    argv = [*prefix, *podstore_command(), "--db", str(db), "watch", str(checkpoint), "--once"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with PodStore.open(db, readonly=True) as store:
        assert store.pods()
        before = store.query("SELECT count(*) FROM allocation_events").rows

    # The same, with the checkpoint owned by another user: without CAP_DAC_READ_SEARCH or
    # CAP_DAC_OVERRIDE, root cannot read it; the sync fails and the store is untouched.
    write_checkpoint_file(checkpoint, dumps_checkpoint([], {}))
    os.chown(checkpoint, 4242, 4242)
    checkpoint.chmod(0o600)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    # A sync that fails (counted invalid), not a usage error: exit 1.
    assert run.returncode == 1, run.stderr
    assert "ermission denied" in run.stderr, run.stderr
    with PodStore.open(db, readonly=True) as store:
        assert store.query("SELECT count(*) FROM allocation_events").rows == before
    # And with a capability, the same file reads: the refusal above was the missing one.
    run = subprocess.run(argv[len(prefix) :], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


# ---- the ship unit against a real PostgreSQL ------------------------------------------------


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    try:
        server = PgServer()
    except PgServerUnavailable as exc:
        pytest.fail(str(exc))
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def read_environment_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile= format as the deploy files use it: KEY=VALUE lines, '#'
    comments (no quoting)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_ship_unit_ships_with_the_url_from_the_environment_file(
    pg: PgServer, tmp_path: Path
) -> None:
    url = pg.create_database("ops_ship")
    with_password = url.replace("postgres@", "postgres:hunter2-secret@", 1)
    init = subprocess.run(
        [*podstore_command(), "fleet", "init", "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    store_dir = tmp_path / "var-lib-podstore"
    store_dir.mkdir(mode=0o700)
    db = store_dir / "podstore.db"
    imported = subprocess.run(
        [*podstore_command(), "--db", str(db), "import", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr

    service = unit("podstore-ship.service")["Service"]
    env_file = tmp_path / "podstore.env"
    env_file.write_text(
        (DEPLOY / "podstore.env.example")
        .read_text()
        .replace(
            read_environment_file(DEPLOY / "podstore.env.example")["PODSTORE_FLEET_URL"],
            with_password,
        )
    )
    env_file.chmod(0o600)
    (exec_start,) = service["ExecStart"]
    argv = [a.replace(STORE_DIR, str(store_dir)) for a in shlex.split(exec_start)]
    assert argv[0] == VENV_PODSTORE
    argv = [*podstore_command(), *argv[1:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODSTORE_", "PG"))}

    # Without the environment file: a usage error that names the variable, nothing shipped.
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2 and "PODSTORE_FLEET_URL" in run.stderr

    env.update(read_environment_file(env_file))
    first = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("shipped ")
    shipped = int(first.stdout.split()[1])
    assert shipped > 0
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("shipped 0 events")
    for run in (first, again):
        assert "hunter2-secret" not in run.stdout + run.stderr
    events = pg.psql("SELECT count(*) FROM fleet_events", database="ops_ship")
    assert int(events) == shipped


def test_watch_unit_ships_with_the_url_from_its_credential(pg: PgServer, tmp_path: Path) -> None:
    """The watch unit's command line, as systemd runs it: ``${CREDENTIALS_DIRECTORY}``
    replaced by the directory holding the ``LoadCredential=`` copy (mode 0400, as systemd
    makes it), here with ``--once`` added: it syncs, ships to a real PostgreSQL, and prunes;
    with an empty credential (no fleet) it syncs and does not ship."""
    url = pg.create_database("ops_watch")
    with_password = url.replace("postgres@", "postgres:hunter3-secret@", 1)
    init = subprocess.run(
        [*podstore_command(), "fleet", "init", "--url", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    service = unit("podstore-watch.service")["Service"]
    (credential,) = service["LoadCredential"]
    name, _, source = credential.partition(":")
    assert source == "/etc/podstore/fleet-url"
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / name).write_text(with_password + "\n")
    (credentials / name).chmod(0o400)
    store_dir = tmp_path / "var-lib-podstore"
    kubelet = tmp_path / "var-lib-kubelet"
    plugins = kubelet / "device-plugins"
    plugins.mkdir(parents=True)
    (tmp_path / "var-log-pods").mkdir()
    shutil.copy(EXAMPLE, plugins / "kubelet_internal_checkpoint")
    (exec_start,) = service["ExecStart"]
    argv = [
        a.replace("${CREDENTIALS_DIRECTORY}", str(credentials))
        .replace("/var/lib/kubelet", str(kubelet))
        .replace("/var/log/pods", str(tmp_path / "var-log-pods"))
        .replace(STORE_DIR, str(store_dir))
        .replace("127.0.0.1:9465", "127.0.0.1:0")
        for a in shlex.split(exec_start)
    ]
    assert argv[0] == VENV_PODSTORE and "postgresql" not in " ".join(argv)
    argv = [*podstore_command(), *argv[1:], "--once"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODSTORE_", "PG"))}
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert "hunter3-secret" not in run.stdout + run.stderr
    with (
        PodStore.open(store_dir / "podstore.db", readonly=True) as store,
        store.reader() as reader,
    ):
        high = reader.high_water()
    assert int(pg.psql("SELECT max(seq) FROM fleet_events", database="ops_watch")) == high

    # No /etc/podstore/fleet-url: systemd writes the SetCredential= fallback of the same ID,
    # which means no fleet; the sync is done and nothing is shipped.
    (fallback,) = service["SetCredential"]
    fallback_name, _, fallback_value = fallback.partition(":")
    assert fallback_name == name
    (credentials / name).chmod(0o600)
    (credentials / name).write_text(fallback_value)
    (plugins / "kubelet_internal_checkpoint").unlink()
    write_checkpoint_file(plugins / "kubelet_internal_checkpoint", dumps_checkpoint([], {}))
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert "holds no fleet URL: not shipping" in run.stderr
    assert int(pg.psql("SELECT max(seq) FROM fleet_events", database="ops_watch")) == high


def _shell_blocks(text: str, after: str) -> list[list[str]]:
    """The ```sh blocks of ``text`` from the line holding ``after`` to the next heading."""
    start = text.index(after)
    end = text.find("\n#", start)
    part = text[start : end if end != -1 else len(text)]
    return [
        [ln.strip() for ln in block.splitlines() if ln.strip()]
        for block in re.findall(r"```sh\n(.*?)```", part, re.S)
    ]


@pytest.mark.parametrize("optional", [True, False], ids=["with-optional", "without-optional"])
@pytest.mark.parametrize(
    ("doc", "after"), [("README.md", "- **systemd**"), ("docs/deploy.md", "## systemd")]
)
def test_the_documented_systemd_steps_work_on_a_fresh_node(
    tmp_path: Path, doc: str, after: str, optional: bool
) -> None:
    """The install steps of README and docs/deploy.md, run as written into an empty root (a
    fresh node: /etc/systemd/system and nothing of podstore's), with or without the steps
    marked optional; systemctl and pip are left out (no systemd here, no index)."""
    repo = DEPLOY.parent
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)
    steps = [
        line
        for block in _shell_blocks((repo / doc).read_text(), after)
        for line in block
        if line.startswith("install ") and (optional or "# optional" not in line)
    ]
    assert any("/etc/podstore" in s for s in steps)
    for step in steps:
        argv = [
            str(root) + a if a.startswith("/etc/") else a
            for a in shlex.split(step.split("#", 1)[0])
        ]
        res = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, f"{doc}: {step}\n{res.stderr}"
    assert (root / "etc/podstore").stat().st_mode & 0o777 == 0o700
    assert (root / "etc/systemd/system/podstore-watch.service").is_file()
    assert (root / "etc/podstore/fleet-url").exists() == optional
