"""The fleet commands as an operator runs them: formats, read-only SQL, URL forms, a server
that is down, and passwords that never show."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from harness.fleetlib import fleet_event_seqs, rows
from harness.pgserver import PgServer

from podstore import FleetUnavailableError, PodStore
from podstore.cli import cli
from podstore.fleet import read
from podstore.fleet.ship import ship

PODSTORE = [sys.executable, "-c", "from podstore.cli import main; main()"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODSTORE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def shipped(tmp_path: Path, fleet_url: str) -> tuple[str, Path]:
    db = tmp_path / "n.db"
    with PodStore.open(db) as store:
        store.insert("pod-a", "main", "nvidia.com/gpu", {0: ["GPU-1"], 1: ["GPU-2"]}, None)
        store.insert("pod-b", "main", "nvidia.com/gpu", {0: ["GPU-1"]}, None)
    result = CliRunner().invoke(
        cli, ["--db", str(db), "ship", "--to", fleet_url, "--node", "node-1"]
    )
    assert result.exit_code == 0, result.output
    assert "shipped 2 events" in result.output and "it holds seq 2" in result.output
    return fleet_url, db


@pytest.mark.parametrize("fmt", ["table", "json", "yaml", "csv"])
def test_listings_in_every_format(shipped: tuple[str, Path], fmt: str) -> None:
    url, _ = shipped
    runner = CliRunner()
    owners = runner.invoke(cli, ["fleet", "owners", "GPU-1", "--url", url, "-o", fmt])
    nodes = runner.invoke(cli, ["fleet", "nodes", "--url", url, "-o", fmt])
    query = runner.invoke(
        cli,
        [
            "fleet",
            "sql",
            "--url",
            url,
            "-o",
            fmt,
            "-p",
            "d=GPU-1",
            "SELECT node, pod_uid, device_id FROM v_fleet_double_allocations "
            "WHERE device_id = :d ORDER BY pod_uid",
        ],
    )
    for result in (owners, nodes, query):
        assert result.exit_code == 0, result.output
    if fmt == "json":
        assert [r["pod_uid"] for r in json.loads(owners.output)] == ["pod-a", "pod-b"]
        (node,) = json.loads(nodes.output)
        assert list(node) == [
            "node",
            "store_id",
            "last_seq",
            "last_shipped_at",
            "events",
            "entries",
            "device_rows",
            "snapshots",
            "refusals",
            "last_refusal",
            "retired_at",
        ]
        assert (node["node"], node["events"], node["device_rows"]) == ("node-1", 2, 3)
        assert node["last_shipped_at"].endswith("Z")
        assert json.loads(query.output) == [
            {"node": "node-1", "pod_uid": "pod-a", "device_id": "GPU-1"},
            {"node": "node-1", "pod_uid": "pod-b", "device_id": "GPU-1"},
        ]
    elif fmt == "yaml":
        assert [r["pod_uid"] for r in yaml.safe_load(owners.output)] == ["pod-a", "pod-b"]
    elif fmt == "csv":
        parsed = list(csv.reader(io.StringIO(owners.output)))
        assert parsed[0] == list(read.OWNERS_COLUMNS)
        assert [r[2] for r in parsed[1:]] == ["pod-a", "pod-b"]
    else:
        assert owners.output.split()[:5] == ["NODE", "STORE_ID", "POD_UID", "CONTAINER", "RESOURCE"]


def test_fleet_sql_refuses_writes_and_changes_nothing(shipped: tuple[str, Path]) -> None:
    url, _ = shipped
    before = rows(url, "SELECT count(*) FROM fleet_events")
    for statement in (
        "DELETE FROM fleet_events",
        "UPDATE fleet_stores SET node = 'x'",
        "CREATE TABLE evil (x int)",
        "COMMIT; DELETE FROM fleet_events",
        "SELECT 1; DELETE FROM fleet_events",
        "SET TRANSACTION READ WRITE",
    ):
        result = _run("fleet", "sql", "--url", url, statement)
        assert result.returncode == 1, (statement, result.stderr)
        assert result.stderr.startswith("podstore: error:") and "Traceback" not in result.stderr
    assert rows(url, "SELECT count(*) FROM fleet_events") == before
    assert rows(url, "SELECT count(*) FROM fleet_stores WHERE node = 'x'") == [(0,)]
    slow = _run("fleet", "sql", "--url", url, "--timeout", "0.2", "SELECT pg_sleep(5)")
    assert slow.returncode == 1 and "statement timeout" in slow.stderr


def test_url_forms_and_the_environment(shipped: tuple[str, Path], pg: PgServer) -> None:
    url, _ = shipped
    psycopg_form = url.replace("postgresql://", "postgresql+psycopg://")
    for form in (url, psycopg_form):
        assert _run("fleet", "nodes", "--url", form).returncode == 0
    from_env = _run("fleet", "nodes", "-o", "json", env={"PODSTORE_FLEET_URL": url})
    assert from_env.returncode == 0 and json.loads(from_env.stdout)[0]["node"] == "node-1"
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_FLEET_URL"}
    missing = subprocess.run(
        [*PODSTORE, "fleet", "nodes"], capture_output=True, text=True, env=env, timeout=120
    )
    assert missing.returncode == 2 and "PODSTORE_FLEET_URL" in missing.stderr
    wrong = _run("fleet", "nodes", "--url", "sqlite:///x.db")
    assert wrong.returncode == 1 and "PostgreSQL" in wrong.stderr


def _files(db: Path) -> tuple[str, str]:
    """Hashes of the store file and of its write-ahead log's content. A reader of a WAL
    database may create an empty -wal (and the -shm index) where none was: no change of the
    store's bytes, so an absent -wal counts as an empty one."""
    wal = db.with_name(db.name + "-wal")
    return (
        hashlib.sha256(db.read_bytes()).hexdigest(),
        hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest(),
    )


def test_server_down_exit_1_store_untouched_password_hidden(
    shipped: tuple[str, Path], pg: PgServer
) -> None:
    url, db = shipped
    secret = "S3cr3t-pw-4711"
    with_password = url.replace("postgres@", f"postgres:{secret}@")
    with PodStore.open(db) as store:
        store.insert("pod-c", "main", "nvidia.com/gpu", {0: ["GPU-3"]}, None)
    # Up: the password is accepted (trust) and never echoed.
    up = _run("--db", str(db), "ship", "--to", with_password, "--node", "node-1")
    assert up.returncode == 0, up.stderr
    assert secret not in up.stdout + up.stderr and "postgres:***@" in up.stdout
    with PodStore.open(db) as store:
        store.insert("pod-d", "main", "nvidia.com/gpu", {0: ["GPU-4"]}, None)
        store_id = store.store_id
    before = _files(db)
    pg.stop()
    try:
        for args in (
            ["--db", str(db), "ship", "--to", with_password, "--node", "node-1"],
            ["fleet", "nodes", "--url", with_password],
            ["fleet", "owners", "GPU-1", "--url", with_password],
            ["fleet", "sql", "--url", with_password, "SELECT 1"],
            ["fleet", "init", "--url", with_password],
        ):
            down = _run(*args)
            assert down.returncode == 1, (args, down.stdout, down.stderr)
            assert "cannot reach the fleet database" in down.stderr
            assert "postgres:***@" in down.stderr
            assert secret not in down.stdout + down.stderr
            assert "Traceback" not in down.stderr
        with PodStore.open(db, readonly=True) as store, pytest.raises(FleetUnavailableError):
            ship(store, with_password, node="node-1")
        # PGPASSWORD is libpq's; it never shows either.
        env_down = _run("fleet", "nodes", "--url", url, env={"PGPASSWORD": secret})
        assert env_down.returncode == 1 and secret not in env_down.stderr
    finally:
        pg.start()
    assert _files(db) == before
    # This process's pooled connections died with the server; the next call reconnects.
    with PodStore.open(db, readonly=True) as store:
        assert ship(store, with_password, node="node-1").shipped == 1
    assert fleet_event_seqs(url, store_id) == [1, 2, 3, 4]
    with PodStore.open(db) as store:
        store.insert("pod-e", "main", "nvidia.com/gpu", {0: ["GPU-5"]}, None)
    assert _run("--db", str(db), "ship", "--to", url, "--node", "node-1").returncode == 0
    assert fleet_event_seqs(url, store_id) == [1, 2, 3, 4, 5]


def test_node_side_never_imports_the_driver(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    PodStore.open(db).close()  # read commands need an existing store
    code = (
        "import sys\n"
        "import podstore\n"
        "from podstore.cli import main\n"
        "for args in (['status'], ['pods'], ['devices'], ['history'], ['--help'],\n"
        "             ['fleet', '--help'], ['ship', '--help']):\n"
        "    try:\n"
        f"        main(['--db', {str(db)!r}, *args])\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, (args, exc.code)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('psycopg', 'podstore.fleet')))\n"
        "print('LOADED', loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "LOADED []" in result.stdout


def test_fleet_sql_max_rows_stops_after_the_limit(shipped: tuple[str, Path]) -> None:
    url, _ = shipped
    query = "SELECT g FROM generate_series(1, 10) g"
    over = _run("fleet", "sql", "--url", url, "-o", "csv", "--max-rows", "4", query)
    assert over.returncode == 1
    # Never more than the limit, in order (rows are written in batches, as the node's sql).
    lines = over.stdout.splitlines()
    assert lines[0] == "g" and lines[1:] == [str(i) for i in range(1, len(lines))]
    assert len(lines) <= 5
    assert over.stderr.startswith("podstore: error:") and "more than 4 rows" in over.stderr
    exact = _run("fleet", "sql", "--url", url, "-o", "csv", "--max-rows", "10", query)
    assert exact.returncode == 0 and exact.stdout.splitlines()[-1] == "10"


def test_fleet_sql_streams_a_large_answer_in_bounded_memory(shipped: tuple[str, Path]) -> None:
    # 600,000 rows of ~45 bytes: held whole (as before) that is ~300 MB of Python objects; a
    # stream holds one page of the cursor and one batch of output at a time.
    url, _ = shipped
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork and exec, so the
    # child would report this (large) test worker's peak.
    code = (
        "import sys\n"
        "from podstore.cli import main\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    with open('/proc/self/status') as f:\n"
        "        hwm = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
        "    print('RSS', hwm, file=sys.stderr)\n"
    )
    query = "SELECT g, md5(CAST(g AS text)) AS h FROM generate_series(1, 600000) g"
    proc = subprocess.run(
        [sys.executable, "-c", code, "fleet", "sql", "--url", url, "-o", "csv", query],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 600_001 and lines[-1].startswith("600000,")
    rss_kb = int(proc.stderr.split("RSS")[-1])
    assert rss_kb < 150 * 1024, rss_kb


def test_ship_and_fleet_commands_without_the_driver_exit_2_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    PodStore.open(db).close()
    code = "import sys; sys.modules['psycopg'] = None\nfrom podstore.cli import main; main()"
    url = "postgresql://podstore:s3cret@db.example:5432/fleet"
    for args in (
        ["--db", str(db), "ship", "--to", url],
        ["fleet", "init", "--url", url],
        ["fleet", "nodes", "--url", url],
        ["fleet", "owners", "GPU-1", "--url", url],
        ["fleet", "sql", "--url", url, "SELECT 1"],
        ["fleet", "verify", "--url", url],
        ["fleet", "grant-node", "n", "--url", url],
        ["fleet", "grant-reader", "r", "--url", url],
        ["fleet", "rename-node", "a", "b", "--url", url],
        ["fleet", "retire", "--node", "a", "--url", url],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "install podstore[fleet]" in lines[0], (args, proc.stderr)
        assert "s3cret" not in proc.stderr
    # Printing the grant SQL needs no driver and no database.
    printed = subprocess.run(
        [sys.executable, "-c", code, "fleet", "grant-node", "n", "--print-sql"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0 and "podstore_node_n" in printed.stdout, printed.stderr


def test_every_fleet_command_takes_the_url_from_the_environment(
    shipped: tuple[str, Path],
) -> None:
    url, db = shipped
    env = {"PODSTORE_FLEET_URL": url}
    for args in (
        ["--db", str(db), "ship", "--node", "node-1"],
        ["fleet", "init"],
        ["fleet", "nodes"],
        ["fleet", "owners", "GPU-1"],
        ["fleet", "sql", "SELECT 1"],
        ["fleet", "verify"],
        ["fleet", "grant-reader", "env_reader"],
        ["fleet", "grant-node", "env-node"],
    ):
        result = _run(*args, env=env)
        assert result.returncode == 0, (args, result.stderr)
