"""The audit commands on the fixture node: every command in every output format, exit codes.

Run in-process through ``podstore.cli.main`` (the console entry point, with its error handling)
on a real database file; a few cases run the installed command as a subprocess.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.audit_fixture import build

from podstore.cli import main
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_upgrade

GPU = "nvidia.com/gpu"
FORMATS = ("table", "json", "yaml", "csv")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("cli") / "node.db"
    build(path, mp).close()
    mp.undo()
    yield path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``podstore ARGS`` in-process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


def _events(*rows: tuple[int, str, str, str, str, dict[str, list[str]]]) -> list[dict[str, Any]]:
    keys = ("seq", "timestamp", "op", "pod_uid", "container", "resource", "device_ids", "released")
    return [dict(zip(keys, (s, f"2026-12-01T{t}:00.000000Z", *rest, []), strict=True))
            for s, t, *rest in rows]  # fmt: skip


# (arguments, columns, the JSON rows expected on the fixture node)
CASES: list[tuple[list[str], list[str], list[dict[str, Any]]]] = [
    (
        ["pods"],
        ["pod_uid", "containers", "entries", "devices", "resources"],
        [
            {"pod_uid": "pod-a", "containers": 1, "entries": 2, "devices": 3,
             "resources": ["intel.com/sriov", GPU]},
            {"pod_uid": "pod-b", "containers": 2, "entries": 2, "devices": 3,
             "resources": ["example.com/fpga", GPU]},
            {"pod_uid": "pod-c", "containers": 1, "entries": 1, "devices": 1, "resources": [GPU]},
            {"pod_uid": "pod-d", "containers": 2, "entries": 2, "devices": 1, "resources": [GPU]},
        ],
    ),
    (
        ["get", "pod-a"],
        ["container", "resource", "numa_node", "device_ids"],
        [
            {"container": "trainer", "resource": "intel.com/sriov", "numa_node": 0,
             "device_ids": ["0000:3b:02.0"]},
            {"container": "trainer", "resource": GPU, "numa_node": 0, "device_ids": ["GPU-0"]},
            {"container": "trainer", "resource": GPU, "numa_node": 1, "device_ids": ["GPU-1"]},
        ],
    ),
    (
        ["devices", "--resource", "example.com/fpga"],
        ["resource", "device_id", "numa_nodes", "registered", "pod_uid", "container"],
        [
            {"resource": "example.com/fpga", "device_id": "fpga-0", "numa_nodes": [-1],
             "registered": False, "pod_uid": "pod-b", "container": "sidecar"},
            {"resource": "example.com/fpga", "device_id": "fpga-1", "numa_nodes": [],
             "registered": True, "pod_uid": None, "container": None},
        ],
    ),
    (
        ["owners", "GPU-3"],
        ["pod_uid", "container", "resource"],
        [
            {"pod_uid": "pod-b", "container": "worker", "resource": GPU},
            {"pod_uid": "pod-c", "container": "rogue", "resource": GPU},
        ],
    ),
    (
        ["owners", "GPU-3", "--at", "2026-12-01T11:00:00Z"],
        ["pod_uid", "container", "resource"],
        [{"pod_uid": "pod-b", "container": "worker", "resource": GPU}],
    ),
    (
        ["owners", "no-such-device"],
        ["pod_uid", "container", "resource"],
        [],
    ),
    (
        ["run-options", "pod-d", "main"],
        ["kind", "name", "value", "permissions", "read_only"],
        [{"kind": "mount", "name": "/data", "value": "/mnt/data", "permissions": None,
          "read_only": False}],
    ),
    (
        ["history", "--pod", "pod-e"],
        ["seq", "timestamp", "op", "pod_uid", "container", "resource", "device_ids",
         "released"],
        _events(
            (8, "11:40", "insert", "pod-e", "job", GPU, {"1": ["GPU-5"]}),
            (9, "12:20", "delete", "pod-e", "job", GPU, {"1": ["GPU-5"]}),
        ),
    ),
    (
        ["history", "--device", "GPU-3", "--since", "2026-12-01T11:00Z",
         "--until", "2026-12-01T12:00Z"],
        ["seq", "timestamp", "op", "pod_uid", "container", "resource", "device_ids",
         "released"],
        _events((5, "11:10", "insert", "pod-c", "rogue", GPU, {"1": ["GPU-3"]})),
    ),
    (
        ["sql", "SELECT uid, id FROM pods WHERE uid >= :from ORDER BY uid", "-p", "from=pod-c"],
        ["uid", "id"],
        [{"uid": "pod-c", "id": 3}, {"uid": "pod-d", "id": 4}],
    ),
    (
        ["sql", "SELECT p.id, c.id, c.name FROM pods p JOIN containers c ON c.pod_id = p.id "
         "WHERE p.uid = 'pod-d' ORDER BY c.id"],
        ["id", "id_2", "name"],
        [{"id": 4, "id_2": 5, "name": "init"}, {"id": 4, "id_2": 6, "name": "main"}],
    ),
    (
        ["migrate", "history"],
        ["revision", "down_revision", "message"],
        [
            {"revision": "0012", "down_revision": "0011",
             "message": "Device-seconds of pruned history, so that a prune is no reset of "
             "the device-seconds counter."},
            {"revision": "0011", "down_revision": "0010",
             "message": "Holding shares fixed when each holding begins: "
             "``v_allocation_intervals`` re-created."},
            {"revision": "0010", "down_revision": "0009",
             "message": "Allocation intervals: ``end`` events in the history, and the view "
             "``v_allocation_intervals``."},
            {"revision": "0009", "down_revision": "0008",
             "message": "Physical devices: the CDI devices' host device nodes, and the views "
             "over them."},
            {"revision": "0008", "down_revision": "0007",
             "message": "Each node item's canonical text kept beside it; each node file's bytes "
             "digested."},
            {"revision": "0007", "down_revision": "0006",
             "message": "The whole node: the CPU, memory and DRA managers' state, the NUMA "
             "topology, pod names."},
            {"revision": "0006", "down_revision": "0005",
             "message": "Lean entries: the decoded response as JSON, device spans shared with "
             "the history, no ts index."},
            {"revision": "0005", "down_revision": "0004",
             "message": "History chain: every event hashed to its predecessor, and the devices "
             "each event released."},
            {"revision": "0004", "down_revision": "0003",
             "message": "Lean writes: clustered (WITHOUT ROWID) child tables, and a history seq "
             "without AUTOINCREMENT."},
            {"revision": "0003", "down_revision": "0002",
             "message": "Store identity: every store gets a store_id (a random UUID), kept for "
             "life."},
            {"revision": "0002", "down_revision": "0001",
             "message": "Audit: decoded response rows, the allocation history, and the SQL "
             "views."},
            {"revision": "0001", "down_revision": None,
             "message": "Initial schema: pods, containers, allocations, per-NUMA device rows, "
             "registered devices."},
        ],
    ),
]  # fmt: skip

# Columns the whole node added at the end of the listings (node-state.md): on this node, which
# holds no CPU, memory or DRA state and no pod names, blank or zero.
_NODE_COLUMNS: dict[str, dict[str, Any]] = {
    "pods": {"namespace": None, "name": None, "cpus": 0, "memory_bytes": 0, "claims": 0},
    "get": {"manager": "devices", "size_bytes": None, "claim": None, "namespace": None,
            "pod_name": None},
    "devices": {"namespace": None, "name": None},
    "owners": {"namespace": None, "name": None, "claim": None},
    "history": {"manager": "devices", "namespace": None, "name": None},
}  # fmt: skip
for _args, _columns, _expected in CASES:
    for _name, _value in _NODE_COLUMNS.get(_args[0], {}).items():
        _columns.append(_name)
        for _row in _expected:
            _row[_name] = _value


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("args", "columns", "expected"), CASES, ids=[" ".join(c[0])[:40] for c in CASES]
)
def test_command_in_every_format(
    node: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    columns: list[str],
    expected: list[dict[str, Any]],
    fmt: str,
) -> None:
    code, out, _err = run(capsys, "--db", str(node), *args, "-o", fmt)
    assert code == 0
    if fmt == "json":
        assert json.loads(out) == expected
        # Stable: keys in column order, two-space indent.
        assert out == json.dumps(expected, indent=2) + "\n"
        assert all(list(row) == columns for row in json.loads(out))
    elif fmt == "yaml":
        assert (yaml.safe_load(out) or []) == expected
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0] == columns
        assert len(rows) == 1 + len(expected)
        for row, want in zip(rows[1:], expected, strict=True):
            assert row[0] == ("" if want[columns[0]] is None else str(want[columns[0]]))
    else:
        lines = out.rstrip("\n").splitlines()
        if not expected:
            assert lines == ["(none)"]
        else:
            assert lines[0].split() == [c.upper() for c in columns]
            assert len(lines) == 1 + len(expected)
            for line, want in zip(lines[1:], expected, strict=True):
                assert line.startswith(str(want[columns[0]]))


def test_table_cells_flatten_lists_and_maps(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--db", str(node), "history", "--pod", "pod-a")
    assert "0:GPU-0 1:GPU-1" in out  # the 12:30 replace
    _, out, _ = run(capsys, "--db", str(node), "history", "--device", "GPU-6", "-o", "csv")
    assert "GPU-0,GPU-1,GPU-2,GPU-3,GPU-4,GPU-5,GPU-6" in out  # a registered list
    _, out, _ = run(capsys, "--db", str(node), "pods")
    assert "intel.com/sriov,nvidia.com/gpu" in out


def test_devices_lists_holders_and_free_registered_devices(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--db", str(node), "devices", "-o", "json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["device_id"], r["pod_uid"]) for r in rows if r["resource"] == GPU] == [
        ("GPU-0", "pod-a"),
        ("GPU-1", "pod-a"),
        ("GPU-2", "pod-b"),
        ("GPU-3", "pod-b"),
        ("GPU-3", "pod-c"),
        ("GPU-4", "pod-d"),
        ("GPU-4", "pod-d"),
        ("GPU-5", None),
        ("GPU-6", None),
    ]


def test_run_options_flags(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", str(node), "run-options", "pod-a", "trainer", "-o", "json")
    assert code == 0
    assert [r["name"] for r in json.loads(out) if r["kind"] == "env"] == [
        "NVIDIA_DRIVER_CAPABILITIES",  # from intel.com/sriov: first in byte order, wins
        "PCIDEVICE_INTEL_COM_SRIOV",
        "NVIDIA_VISIBLE_DEVICES",
    ]
    _, out, _ = run(
        capsys, "--db", str(node), "run-options", "pod-a", "trainer", "--no-cdi-devices"
    )
    assert "cdi" not in out.split()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["get", "no-such-pod"], 1, "pod 'no-such-pod' not found"),
        (["run-options", "pod-a", "nope"], 1, "not found"),
        (["run-options", "nope", "trainer"], 1, "not found"),
        (["owners", "GPU-3", "--at", "half past ten"], 2, "ISO 8601"),
        (["history", "--since", "2026-13-40"], 2, "ISO 8601"),
        (["history", "--until", "soon"], 2, "ISO 8601"),
        (["pods", "-o", "xml"], 2, "xml"),
        (["get"], 2, "Missing argument"),
        (["sql", "SELECT 1", "-p", "novalue"], 2, "name=value"),
        (["sql", "SELEKT 1"], 1, "syntax error"),
        (["sql", "SELECT :missing"], 1, "error"),
        (["sql", "SELECT 1; SELECT 2"], 1, "error"),
        (["sql", "SELECT * FROM no_such_table"], 1, "no such table"),
    ],
)
def test_errors_go_to_stderr_with_their_exit_code(
    node: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    got, out, err = run(capsys, "--db", str(node), *args)
    assert got == code
    assert out == ""
    assert message in err


@pytest.mark.parametrize(
    "args",
    [["pods"], ["get", "p"], ["devices"], ["owners", "d"], ["run-options", "p", "c"],
     ["history"], ["sql", "SELECT 1"]],
)  # fmt: skip
def test_read_commands_never_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    missing = tmp_path / "missing.db"
    code, _out, err = run(capsys, "--db", str(missing), *args)
    assert code == 1
    assert "does not exist" in err
    assert not missing.exists()


def test_read_commands_refuse_an_old_schema_and_name_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.db"
    run_upgrade(ConnectOptions(path=str(old)), "0001")
    code, _, err = run(capsys, "--db", str(old), "pods")
    assert code == 1
    assert "podstore migrate upgrade" in err
    conn = sqlite3.connect(old)
    try:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)
    finally:
        conn.close()


def test_podstore_db_environment_variable(
    node: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODSTORE_DB", str(node))
    code, out, _ = run(capsys, "pods", "-o", "json")
    assert code == 0
    assert len(json.loads(out)) == 4


def _command() -> list[str]:
    installed = Path(sys.executable).parent / "podstore"
    if installed.exists():
        return [str(installed)]
    found = shutil.which("podstore")
    return [found] if found else [sys.executable, "-c", "from podstore.cli import main; main()"]


def test_the_installed_command_reports_conflicts_on_stderr(node: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    proc = subprocess.run(
        [*_command(), "--db", str(node), "run-options", "pod-a", "trainer"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0
    assert "conflicting setting for env 'NVIDIA_DRIVER_CAPABILITIES'" in proc.stderr
    assert proc.stdout.splitlines()[0].split() == [
        "KIND",
        "NAME",
        "VALUE",
        "PERMISSIONS",
        "READ_ONLY",
    ]


def test_shell_completion(node: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    script = subprocess.run(
        _command(),
        capture_output=True,
        text=True,
        env={**env, "_PODSTORE_COMPLETE": "bash_source"},
        timeout=120,
    )
    assert script.returncode == 0
    assert "_podstore_completion" in script.stdout
    assert "complete -o nosort -F _podstore_completion podstore" in script.stdout

    def complete(words: str, **more: str) -> list[str]:
        proc = subprocess.run(
            _command(),
            capture_output=True,
            text=True,
            env={
                **env,
                **more,
                "_PODSTORE_COMPLETE": "bash_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split(" ")) - 1),
            },
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]

    assert {"pods", "get", "devices", "owners", "run-options", "history", "sql"} <= set(
        complete("podstore ")
    )
    assert complete(f"podstore --db {node} get pod-") == ["pod-a", "pod-b", "pod-c", "pod-d"]
    assert complete(f"podstore --db {node} run-options pod-d ") == ["init", "main"]
    assert complete("podstore --db /nonexistent/x.db get ") == []
    # The store named by $PODSTORE_DB when --db is not given (click reads it for the option).
    assert complete("podstore run-options pod-d ", PODSTORE_DB=str(node)) == ["init", "main"]
