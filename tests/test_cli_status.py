"""`podstore status` run as a real process."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml
from harness.cli import podstore, status_json

from podstore import PodStore
from podstore.sqlite.migrate import head_revision

ZERO = {
    "pods": 0,
    "containers": 0,
    "allocations": 0,
    "device_rows": 0,
    "distinct_devices": 0,
    "registered_resources": 0,
}


def fill(path: Path) -> None:
    with PodStore.open(path) as store:
        store.insert("p1", "c1", "r", {0: ["a", "b"]}, b"")
        store.insert("p1", "c2", "r", {0: ["a"]}, None)
        store.insert("p2", "c", "r2", {-1: ["x"], 0: ["x"]}, b"")
        store.insert("p3", "c", "r2", None, b"")
        store.delete(["p3"])
        store.set_registered_devices({"r": ["a", "b"], "r2": []})


FILLED = {
    "pods": 2,
    "containers": 3,
    "allocations": 3,
    "device_rows": 5,
    "distinct_devices": 3,
    "registered_resources": 2,
}


def create(path: Path) -> None:
    PodStore.open(path).close()


def test_status_of_a_missing_store_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    out = podstore("status", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith("podstore: error: ")
    assert "does not exist" in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_status_never_creates_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.db"
    out = podstore("--db", str(target), "status", cwd=tmp_path)
    assert out.returncode == 1
    assert "does not exist" in out.stderr
    assert not (tmp_path / "nonexistent").exists()


def test_status_of_dev_null_is_one_clear_line(tmp_path: Path) -> None:
    before = set(os.listdir("/dev"))
    out = podstore("--db", "/dev/null", "status", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("podstore: error: ")
    assert "not a regular file" in out.stderr
    assert "Warning" not in out.stderr
    assert set(os.listdir("/dev")) - before == set()
    assert not os.path.exists("/dev/null-journal")
    # A writing command is refused the same way, before SQLite could create a journal.
    example = Path(__file__).parent.parent / "examples" / "kubelet_internal_checkpoint"
    out = podstore("--db", "/dev/null", "import", str(example), cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr == "podstore: error: database: /dev/null is not a regular file\n"
    assert set(os.listdir("/dev")) - before == set()


def test_status_json_counts_zero_then_the_inserted_rows(tmp_path: Path) -> None:
    create(tmp_path / "podstore.db")
    info = status_json(cwd=tmp_path)
    assert {k: info[k] for k in ZERO} == ZERO
    assert info["schema_revision"] == head_revision()
    fill(tmp_path / "podstore.db")
    info = status_json(cwd=tmp_path)
    assert {k: info[k] for k in FILLED} == FILLED


def test_status_table_shows_the_counts(tmp_path: Path) -> None:
    fill(tmp_path / "podstore.db")
    out = podstore("status", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {
        label.strip(): value.strip()
        for label, value in (line.rsplit("  ", 1) for line in out.stdout.splitlines())
    }
    assert rows["pods"] == "2"
    assert rows["containers"] == "3"
    assert rows["allocations"] == "3"
    assert rows["distinct devices"] == "3"


@pytest.mark.parametrize("fmt", ["json", "yaml", "csv", "table"])
def test_status_takes_the_output_option(tmp_path: Path, fmt: str) -> None:
    fill(tmp_path / "podstore.db")
    out = podstore("status", "-o", fmt, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if fmt == "json":
        info = json.loads(out.stdout)
        assert info == status_json(cwd=tmp_path)  # --json is the same output
        assert list(info)[:3] == ["database", "store_id", "schema_revision"]
    elif fmt == "yaml":
        assert {k: v for k, v in yaml.safe_load(out.stdout).items() if k in FILLED} == FILLED
    elif fmt == "csv":
        header, row = list(csv.reader(io.StringIO(out.stdout)))
        assert {k: int(v) for k, v in zip(header, row, strict=True) if k in FILLED} == FILLED
    else:
        assert out.stdout.splitlines()[0].split()[0] == "database"


def test_db_option(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "node.db"
    fill_dir = tmp_path / "elsewhere"
    fill_dir.mkdir()
    fill(target)
    assert {k: v for k, v in status_json("--db", str(target), cwd=fill_dir).items()
            if k in FILLED} == FILLED  # fmt: skip
    assert not (fill_dir / "podstore.db").exists()
    url = status_json("--db", f"sqlite:///{target}", cwd=fill_dir)
    assert url["pods"] == 2


def test_db_and_readonly_after_the_command(tmp_path: Path) -> None:
    target = tmp_path / "node.db"
    fill(target)
    out = podstore("status", "--db", str(target), "--readonly", "-o", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pods"] == 2
    # After the command wins over before it (and over $PODSTORE_DB).
    env = {"PODSTORE_DB": str(tmp_path / "missing.db")}
    out = podstore("--db", "nope.db", "status", "--db", str(target), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr


def test_podstore_db_environment_variable_and_db_wins(tmp_path: Path) -> None:
    env_db = tmp_path / "env.db"
    fill(env_db)
    info = status_json(cwd=tmp_path, env={"PODSTORE_DB": str(env_db)})
    assert info["pods"] == 2
    assert not (tmp_path / "podstore.db").exists()
    other = tmp_path / "other.db"
    create(other)
    info = status_json("--db", str(other), cwd=tmp_path, env={"PODSTORE_DB": str(env_db)})
    assert info["pods"] == 0


def test_a_foreign_database_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "podstore.db")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    out = podstore("status", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("podstore: error:")
    assert "Traceback" not in out.stderr


def test_help_and_bad_usage(tmp_path: Path) -> None:
    out = podstore("--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "status" in out.stdout
    assert podstore("no-such-command", cwd=tmp_path).returncode == 2
    assert podstore("status", "--bogus", cwd=tmp_path).returncode == 2
    assert not (tmp_path / "podstore.db").exists()


def test_installed_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "podstore"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable} (package not installed there)")
    fill(tmp_path / "podstore.db")
    out = podstore("status", "--json", cwd=tmp_path, command=[str(script)])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pods"] == 2
