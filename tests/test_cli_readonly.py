"""Read-only where reading is enough: every command that only reads works for a user who may
read the store but not write it or its directory, creates nothing, and says nothing extra;
``--readonly`` makes a writing command fail before it changes anything; a missing store is an
error for read commands and is never created.

The non-owner runs are real child processes that become ``nobody`` before the command opens the
store. The interpreter itself may live where ``nobody`` cannot read (here: under /root), so the
child starts as root, imports what the commands need, drops to nobody (groups, gid, uid) and
only then runs the command: everything the command does with the store happens as nobody.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.audit_fixture import build

from podstore import PodStore
from podstore.sqlite.migrate import HEAD_REVISION

EXAMPLE = Path(__file__).parent.parent / "examples" / "kubelet_internal_checkpoint"
NOBODY = 65534

_AS_NOBODY = """
import os, sys
# Everything a command may import lazily, imported while the interpreter is still readable.
import importlib, pkgutil
import podstore
# Every module of the package (the store imports its write side inside the methods that use
# it), migrations aside: Alembic reads those below.
for info in pkgutil.walk_packages(podstore.__path__, "podstore."):
    if ".migrations" not in info.name:
        importlib.import_module(info.name)
import google.protobuf.message
import click
from podstore.cli.main import cli
for name in cli.list_commands(click.Context(cli)):  # each command's module
    cli.get_command(click.Context(cli), name)
import alembic.command, alembic.config, alembic.script, sqlalchemy, yaml, csv, json, difflib
from podstore.sqlite.migrate import head_revision, script_directory
# Read every revision script now (walk_revisions is lazy): nobody may not see the checkout.
list(script_directory().walk_revisions())
head_revision()
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
assert os.geteuid() == 65534 and os.getegid() == 65534
from podstore.cli import main
sys.argv[0] = "podstore"
main(sys.argv[1:])
"""


def as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    return subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, *args],
        cwd=cwd,
        env={**env, "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``path``: (size, mode)."""
    out = {}
    for p in sorted(path.rglob("*")):
        st = p.stat()
        out[str(p.relative_to(path))] = (st.st_size, st.st_mode)
    return out


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory others may enter and read but not write, holding the fixture store
    (root's, mode 0644, no -wal or -shm left), outside pytest's private tmp tree."""
    if os.geteuid() != 0:
        pytest.skip("running a command as another user needs root (CI runs as root)")
    top = Path(tempfile.mkdtemp(prefix="podstore-ro-"))
    try:
        os.chmod(top, 0o755)
        store = top / "node.db"
        mp = pytest.MonkeyPatch()
        build(store, mp).close()
        mp.undo()
        # The last connection to close removes -wal and -shm: the file alone is left, in WAL
        # mode, as a node agent leaves it when it stops.
        sqlite3.connect(store).close()
        os.chmod(store, 0o644)
        assert sorted(p.name for p in top.iterdir()) == ["node.db"]
        # The checkout itself may be private (a clone in a 0700 temp dir): nobody reads a copy.
        shutil.copy(EXAMPLE, top / EXAMPLE.name)
        os.chmod(top / EXAMPLE.name, 0o644)
        yield top
    finally:
        shutil.rmtree(top)


# Every command that only reads the store (export writes only its output file).
READS = [
    ["status"],
    ["status", "-o", "json"],
    ["pods"],
    ["get", "pod-a"],
    ["devices", "-o", "yaml"],
    ["owners", "GPU-3"],
    ["owners", "GPU-3", "--at", "2026-12-01T11:00:00Z"],
    ["run-options", "pod-a", "trainer"],
    ["history", "-o", "csv"],
    ["sql", "SELECT count(*) FROM v_allocations"],
    ["verify"],
    ["migrate", "current"],
    ["migrate", "history"],
    ["verify-checkpoint", "{example}"],  # the copy in the shared directory
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a[:2]) for a in READS])
def test_a_non_owner_with_read_permission_can_run_every_read_command(
    shared: Path, args: list[str]
) -> None:
    store = shared / "node.db"
    assert not os.access(shared, os.W_OK) or os.geteuid() == 0  # root could; nobody cannot
    before = tree(shared)
    args = [a.replace("{example}", str(shared / EXAMPLE.name)) for a in args]
    out = as_nobody("--db", str(store), *args, cwd=Path("/"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" or args[0] == "run-options"  # run-options: conflicts, on purpose
    assert "podstore: warning:" not in out.stderr and "Warning:" not in out.stderr
    assert out.stdout
    assert tree(shared) == before  # nothing created, nothing changed


def test_that_user_really_cannot_write_the_store(shared: Path) -> None:
    before = tree(shared)
    example = str(shared / EXAMPLE.name)
    denied = as_nobody("--db", str(shared / "node.db"), "import", example, cwd=Path("/"))
    assert denied.returncode == 1
    assert denied.stderr.startswith("podstore: error:")
    assert "not writable" in denied.stderr
    assert "Traceback" not in denied.stderr
    assert tree(shared) == before


def test_a_non_owner_can_export(shared: Path) -> None:
    outdir = Path(tempfile.mkdtemp(prefix="podstore-out-"))
    try:
        os.chown(outdir, NOBODY, NOBODY)
        before = tree(shared)
        out = as_nobody("--db", str(shared / "node.db"), "export", str(outdir / "cp"), cwd=outdir)
        assert out.returncode == 0, out.stderr
        assert (outdir / "cp").stat().st_uid == NOBODY
        assert tree(shared) == before
    finally:
        shutil.rmtree(outdir)


def test_a_non_owner_reads_while_a_writer_holds_the_store(shared: Path) -> None:
    """Runs last in this module: it leaves the store changed."""
    store = shared / "node.db"
    writer = PodStore.open(store)
    try:
        writer.insert("pod-w", "c", "r", {0: ["w"]}, None)
        for path in shared.iterdir():  # -wal and -shm readable, as the store file is
            os.chmod(path, 0o644)
        out = as_nobody("--db", str(store), "pods", "-o", "json", cwd=Path("/"))
        assert out.returncode == 0, out.stderr
        assert "pod-w" in out.stdout
    finally:
        writer.close()


# ---- --readonly, missing stores -----------------------------------------------------------


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    return subprocess.run(
        [sys.executable, "-c", "from podstore.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize(
    "args",
    [["import", str(EXAMPLE)], ["migrate", "upgrade"], ["migrate", "downgrade", "0001", "--yes"]],
)
def test_readonly_refuses_a_writing_command_and_changes_nothing(
    tmp_path: Path, args: list[str], where: str
) -> None:
    store = tmp_path / "s.db"
    with PodStore.open(store) as s:
        s.insert("p", "c", "r", {0: ["d"]}, b"")
    dump = list(sqlite3.connect(store).iterdump())
    argv = ["--readonly", *args] if where == "before" else [*args, "--readonly"]
    out = run("--db", str(store), *argv, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr == (
        "podstore: error: --readonly was given, and this command writes the store\n"
    )
    assert list(sqlite3.connect(store).iterdump()) == dump


@pytest.mark.parametrize("args", [["migrate", "current"], ["migrate", "downgrade", "0001"],
                                  ["export", "out"], ["status"], ["verify"]])  # fmt: skip
def test_a_missing_store_is_an_error_and_nothing_is_created(
    tmp_path: Path, args: list[str]
) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    out = run("--db", str(missing), *args, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("podstore: error:")
    assert "does not exist" in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_migrate_current_on_a_missing_path_leaves_no_file(tmp_path: Path) -> None:
    out = run("--db", str(tmp_path / "x.db"), "migrate", "current", cwd=tmp_path)
    assert out.returncode == 1
    assert list(tmp_path.iterdir()) == []
    PodStore.open(tmp_path / "x.db").close()
    out = run("--db", str(tmp_path / "x.db"), "migrate", "current", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{HEAD_REVISION} (head)\n"
