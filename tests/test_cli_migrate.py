"""``podstore migrate`` cannot surprise: unknown or wrong-way revisions are one-line errors, a
downgrade that drops data says exactly what and needs ``--yes``, ``--backup FILE`` keeps an
online copy first, and progress bars appear on a terminal only."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from harness.cli import on_a_terminal, without_paths

from podstore import PodStore
from podstore.checkpoint import PodName
from podstore.cli import main
from podstore.sqlite.migrate import HEAD_REVISION

EXAMPLE = Path(__file__).parent.parent / "examples" / "kubelet_internal_checkpoint"


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """``podstore ARGS`` in this process (the console entry point, with its error handling)."""

    def call(*args: str | Path, cwd: Path) -> Ran:
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in args])
        out, err = capsys.readouterr()
        code = exc.value.code
        return Ran(code if isinstance(code, int) else 0 if code is None else 1, out, err)

    return call


def run_process(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    return subprocess.run(
        [sys.executable, "-c", "from podstore.cli import main; main()", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def node(tmp_path: Path) -> Path:
    path = tmp_path / "node.db"
    with PodStore.open(path) as store:
        store.import_checkpoint(EXAMPLE)
        store.insert("extra", "c", "nvidia.com/gpu", {0: ["GPU-x"]}, None)
    return path


def revision(path: Path) -> str | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["upgrade", "9999"], "unknown revision '9999' (known: base, 0001, 0002, 0003, 0004"),
        (["downgrade", "9999"], "unknown revision '9999'"),
        (["downgrade", "nonsense"], "unknown revision 'nonsense'"),
        (["upgrade", "0001"], f"revision 0001 is older than the store's revision {HEAD_REVISION}"),
        (["downgrade", "head"], "schema already at"),
    ],
)
def test_unknown_and_wrong_way_revisions_are_one_line_errors(
    run: Callable[..., Ran], node: Path, args: list[str], message: str
) -> None:
    before = dump(node)
    out = run("--db", node, "migrate", *args, cwd=node.parent)
    assert "Traceback" not in out.stderr
    if message == "schema already at":
        assert out.returncode == 0
        assert out.stdout == f"schema already at {HEAD_REVISION}\n"
    else:
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1
        assert out.stderr.startswith(f"podstore: error: {message}")
    assert dump(node) == before


def test_downgrade_to_a_newer_revision_is_refused(run: Callable[..., Ran], node: Path) -> None:
    assert (
        run("--db", node, "migrate", "downgrade", "0001", "--yes", cwd=node.parent).returncode == 0
    )
    out = run("--db", node, "migrate", "downgrade", "0002", cwd=node.parent)
    assert out.returncode == 1
    assert out.stderr == (
        "podstore: error: revision 0002 is newer than the store's revision 0001; "
        "use `podstore migrate upgrade 0002`\n"
    )


def test_the_rows_a_downgrade_drops_are_named_in_numeric_order(
    run: Callable[..., Ran], tmp_path: Path
) -> None:
    """Node events (revision 0007) at seqs 3, 10 and 11 among device events: the listing
    names them 3, 10, 11, not as text (10, 11, 3)."""
    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        for i in range(2):
            store.insert(f"p{i}", "c", "r", {0: [f"d{i}"]}, None)  # seqs 1, 2
        store.set_pod_names({"p0": PodName("ns", "a")})  # 3
        for i in range(2, 8):
            store.insert(f"p{i}", "c", "r", {0: [f"d{i}"]}, None)  # 4..9
        names = {"p0": PodName("ns", "a"), "p1": PodName("ns", "b"), "p2": PodName("ns", "c")}
        store.set_pod_names(names)  # 10, 11
    out = run("--db", db, "migrate", "downgrade", "0006", cwd=tmp_path)
    assert out.returncode == 1
    assert "  3 rows of table allocation_events: seq=3, seq=10, seq=11" in out.stderr.splitlines()


def test_a_downgrade_that_drops_data_says_what_and_needs_yes(
    run: Callable[..., Ran], node: Path
) -> None:
    before = dump(node)
    events = count(node, "allocation_events")
    responses = count(node, "allocations WHERE response IS NOT NULL")
    with PodStore.open(node, readonly=True) as store:
        store_id = store.store_id
    out = run("--db", node, "migrate", "downgrade", "0001", cwd=node.parent)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == f"podstore: error: downgrading from {HEAD_REVISION} to 0001 would drop:"
    assert f"  table allocation_events ({events:,} rows)" in lines
    # the decoded responses (revision 0006: a column, which the response_* views read)
    assert f"  column allocations.response ({responses} non-null values)" in lines
    assert "  view response_envs" in lines
    assert "  1 row of table store_meta: key=store_id" in lines
    assert "  view v_allocations" in lines
    assert lines[-1].startswith("nothing was changed; run again with --yes")
    assert dump(node) == before  # the dry run was rolled back
    assert revision(node) == HEAD_REVISION
    with PodStore.open(node, readonly=True) as store:
        assert store.store_id == store_id
    out = run("--db", node, "migrate", "downgrade", "0001", "--yes", cwd=node.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"schema at 0001 (was {HEAD_REVISION})\n"
    assert revision(node) == "0001"
    assert count(node, "allocations") == 12  # the 0001 tables keep their rows


def test_downgrade_to_base_lists_every_table(run: Callable[..., Ran], node: Path) -> None:
    out = run("--db", node, "migrate", "downgrade", "base", cwd=node.parent)
    assert out.returncode == 1
    for table in (
        "pods",
        "containers",
        "allocations",
        "allocation_device_spans",
        "allocation_events",
    ):
        assert f"  table {table} (" in out.stderr
    assert revision(node) == HEAD_REVISION


def test_backup_before_a_migration(run: Callable[..., Ran], node: Path) -> None:
    backup = node.parent / "before.db"
    with PodStore.open(node, readonly=True) as store:
        entries = store.to_checkpoint_data()
        store_id = store.store_id
    out = run(
        "--db", node, "migrate", "downgrade", "0002", "--yes", "--backup", backup, cwd=node.parent
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("backed up ")
    assert out.stdout.splitlines()[1] == f"schema at 0002 (was {HEAD_REVISION})"
    assert backup.stat().st_mode & 0o777 == 0o600
    assert not Path(f"{backup}-wal").exists()  # self-contained
    assert revision(backup) == HEAD_REVISION
    with PodStore.open(backup, readonly=True) as copy:
        assert copy.store_id == store_id
        assert copy.to_checkpoint_data() == entries
    # Never over an existing file; the refusal comes before the migration.
    out = run("--db", node, "migrate", "upgrade", "--backup", backup, cwd=node.parent)
    assert out.returncode == 1
    assert "already exists" in out.stderr
    assert revision(node) == "0002"
    out = run(
        "--db", node, "migrate", "upgrade", "--backup", node.parent / "b2.db", cwd=node.parent
    )
    assert out.returncode == 0, out.stderr
    assert revision(node) == HEAD_REVISION
    assert revision(node.parent / "b2.db") == "0002"


def test_upgrade_creates_a_missing_store_and_downgrade_does_not(
    run: Callable[..., Ran], tmp_path: Path
) -> None:
    out = run("--db", tmp_path / "gone.db", "migrate", "downgrade", "0001", cwd=tmp_path)
    assert out.returncode == 1
    assert "does not exist" in out.stderr
    assert list(tmp_path.iterdir()) == []
    out = run("--db", tmp_path / "new.db", "migrate", "upgrade", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"schema at {HEAD_REVISION} (was base)\n"


@pytest.fixture
def large_node(tmp_path: Path, node: Path) -> Path:
    """A store past the size at which migrations show progress (4 MiB)."""
    with PodStore.open(node) as store:
        first = store.to_checkpoint_data()[:5]
        store.from_checkpoint_data(
            [replace(e, pod_uid=f"{e.pod_uid}-{i}") for i in range(600) for e in first]
        )
        with store.transaction():  # history rows: big registered-device lists
            for _ in range(3):
                store.set_registered_devices({"r": [f"d{i:06d}" for i in range(20_000)]})
                store.set_registered_devices({"r": []})
    assert node.stat().st_size >= 4 << 20
    return node


def test_progress_on_a_terminal_only(large_node: Path) -> None:
    args = ["--db", str(large_node), "migrate", "downgrade", "0002", "--yes"]
    code, shown = on_a_terminal([*args, "--backup", str(large_node.parent / "b.db")],
                                 large_node.parent)  # fmt: skip
    assert code == 0, shown
    assert "backing up" in shown and "100%" in shown
    assert "downgrade to 0002" in shown
    out = run_process("--db", large_node, "migrate", "upgrade", "--backup",
                      large_node.parent / "c.db", cwd=large_node.parent)  # fmt: skip
    assert out.returncode == 0
    assert out.stderr == ""  # no bar off a terminal
    assert "%" not in without_paths(out.stdout, large_node.parent)
    shutil.rmtree(large_node.parent)
