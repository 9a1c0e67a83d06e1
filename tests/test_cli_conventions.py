"""Conventions every command keeps: the global options before or after the command, ``-o`` on
every command that lists things, strict JSON, control characters escaped in tables,
``--busy-timeout``; and an import that cannot empty a store by accident."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from harness.cli import commands, subcommand

from podstore import ImportRefusedError, PodStore
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file
from podstore.cli import cli, main
from podstore.types import PodDevicesEntry

EXAMPLE = Path(__file__).parent.parent / "examples" / "kubelet_internal_checkpoint"


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


def leaf(path: str) -> click.Command:
    command: click.Command = cli
    for name in path.split()[1:]:
        assert isinstance(command, click.Group)
        command = subcommand(command, name)
    return command


LEAVES = [c for c in commands(cli) if not isinstance(leaf(c), click.Group)]
# Commands that change something or only report an outcome print a line, not a listing.
NOT_LISTINGS = {
    "podstore import",
    "podstore import-node",
    "podstore export",
    "podstore migrate upgrade",
    "podstore migrate downgrade",
    "podstore migrate current",
    "podstore reset-identity",
    "podstore prune",
    "podstore fleet init",
    "podstore fleet grant-node",
    "podstore fleet grant-reader",
    "podstore fleet rename-node",
    "podstore fleet retire",
    "podstore ship",
    "podstore watch",
    # Its output is the Prometheus text exposition format (docs/watch.md), not a listing.
    "podstore metrics",
}


@pytest.mark.parametrize("path", LEAVES)
def test_every_command_takes_the_global_options_after_its_name(path: str) -> None:
    opts = {o for p in leaf(path).params for o in getattr(p, "opts", ())}
    assert {"--db", "--readonly", "--busy-timeout"} <= opts


@pytest.mark.parametrize("path", [c for c in LEAVES if c not in NOT_LISTINGS])
def test_every_listing_takes_the_output_option(path: str) -> None:
    opts = {o for p in leaf(path).params for o in getattr(p, "opts", ())}
    assert {"-o", "--output"} <= opts


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "node.db"
    with PodStore.open(path) as store:
        store.import_checkpoint(EXAMPLE)
        store.insert("pod\nwith-newline\x1b[2J", "c\tx", "r", {0: ["dev\u202eice"]}, None)
    yield path


@pytest.mark.parametrize(
    "args",
    [["pods"], ["devices", "-o", "csv"], ["history", "-o", "json"], ["status"],
     ["sql", "SELECT count(*) FROM pods"], ["migrate", "current"], ["verify"]],
)  # fmt: skip
def test_db_after_the_command_is_the_same_as_before(
    node: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    before = run(capsys, "--db", node, *args)
    after = run(capsys, *args, "--db", node)
    assert before[0] == after[0] == 0, before[2] + after[2]
    assert before == after
    # A value after the command wins over one before it.
    assert run(capsys, "--db", node.parent / "missing.db", *args, "--db", node) == before


def test_busy_timeout_is_checked_and_used(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--db", node, "--busy-timeout", "0.5", "pods")[0] == 0
    assert run(capsys, "--db", node, "pods", "--busy-timeout", "0")[0] == 0
    code, _out, err = run(capsys, "--db", node, "pods", "--busy-timeout", "-1")
    assert code == 2 and "busy-timeout" in err
    # A writer waits that long for the lock, then fails with one line.
    holder = sqlite3.connect(node, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        code, _out, err = run(capsys, "--db", node, "import", EXAMPLE, "--busy-timeout", "0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 1
    assert err.startswith("podstore: error: the database stayed locked")


def test_tables_escape_control_characters(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", node, "pods")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1 + 4  # header and one line per pod, the newline in a uid notwithstanding
    assert any(line.startswith("pod\\nwith-newline\\x1b[2J") for line in lines)
    assert all(ch.isprintable() for line in lines for ch in line)
    _, out, _ = run(capsys, "--db", node, "devices", "--resource", "r")
    assert "dev\\u202eice" in out and "c\\tx" in out
    # Structured formats carry the values exactly.
    _, out, _ = run(capsys, "--db", node, "pods", "-o", "json")
    assert "pod\nwith-newline\x1b[2J" in [p["pod_uid"] for p in json.loads(out)]


def test_sql_json_is_strict(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--db", node, "sql", "SELECT 1e999 AS a, -1e999 AS b", "-o", "json")
    assert code == 0

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in JSON")

    assert json.loads(out, parse_constant=refuse) == [{"a": "Infinity", "b": "-Infinity"}]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--max-rows", "3"], 1, "more than 3 rows"),
        (["--max-rows", "4"], 0, ""),
        (["--timeout", "0"], 0, ""),
        (["--timeout", "-1"], 2, "--timeout"),
    ],
)
def test_sql_limits(
    node: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    got, out, err = run(capsys, "--db", node, "sql", "SELECT uid FROM pods", *args, "-o", "csv")
    assert got == code
    assert message in err
    if code == 0:
        assert len(list(csv.reader(io.StringIO(out)))) == 1 + 4


@pytest.mark.parametrize("fmt", ["json", "yaml", "csv", "table"])
def test_rows_before_a_limit_make_a_whole_document(
    node: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """A statement stopped by --max-rows exits 1 and says so, and the rows before the stop
    are printed as a document of their format (not a lone ``[``)."""
    query = "SELECT uid FROM pods ORDER BY uid"
    code, out, err = run(capsys, "--db", node, "sql", query, "--max-rows", "3", "-o", fmt)
    assert code == 1 and "more than 3 rows" in err
    _, whole, _ = run(capsys, "--db", node, "sql", query, "-o", "json")
    first = [r["uid"] for r in json.loads(whole)][:3]
    if fmt == "json":
        assert [r["uid"] for r in json.loads(out)] == first
    elif fmt == "yaml":
        assert [r["uid"] for r in yaml.safe_load(out)] == first
    elif fmt == "csv":
        assert [r[0] for r in csv.reader(io.StringIO(out))] == ["uid", *first]
    else:
        assert len(out.splitlines()) == 1 + 3


def test_a_closed_pipe_ends_the_listing_quietly(node: Path) -> None:
    """``podstore sql ... | head``: the reader goes away; no traceback, exit 1."""
    many = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 300000) "
        "SELECT i FROM n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", "from podstore.cli import main; main()", "--db", str(node),
         "sql", many],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err


# ---- import that cannot empty a store ----------------------------------------------------------


def all_skipped(path: Path) -> Path:
    """A valid checkpoint whose every AllocResp fails to decode."""
    bad = b"\xff\xff\xff"
    entries = [PodDevicesEntry(f"p{i}", "c", "r", {0: [f"d{i}"]}, bad) for i in range(3)]
    write_checkpoint_file(str(path), dumps_checkpoint(entries, {"r": ["d0"]}))
    return path


def test_an_import_whose_every_entry_was_skipped_is_refused(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = all_skipped(node.parent / "bad")
    before = list(sqlite3.connect(node).iterdump())
    code, out, err = run(capsys, "--db", node, "import", bad)
    assert code == 1
    assert out == ""
    assert err.startswith("podstore: error: ")
    assert "all 3 of its entries were skipped" in err
    assert "would drop all 12 entries" in err
    assert "--allow-skipped" in err
    assert err.count("\n") == 1
    assert list(sqlite3.connect(node).iterdump()) == before
    # --merge drops nothing, so it goes ahead (and imports nothing).
    code, out, _ = run(capsys, "--db", node, "import", bad, "--merge")
    assert code == 0
    assert "imported 0 of 3 entries" in out
    assert "skipped 3 entries whose AllocResp does not decode" in out
    # --allow-skipped replaces the store's entries with none, as kubelet would.
    code, out, _ = run(capsys, "--db", node, "import", bad, "--allow-skipped")
    assert code == 0, out
    with PodStore.open(node, readonly=True) as store:
        assert store.size() == 0
    # Into an empty store there is nothing to drop.
    code, out, _ = run(capsys, "--db", node.parent / "fresh.db", "import", bad)
    assert code == 0


def test_the_api_refuses_only_when_asked(tmp_path: Path) -> None:
    bad = all_skipped(tmp_path / "bad")
    with PodStore.open(tmp_path / "s.db") as store:
        store.insert("keep", "c", "r", {0: ["k"]}, b"")
        with pytest.raises(ImportRefusedError) as exc:
            store.import_checkpoint(bad, allow_all_skipped=False)
        assert (exc.value.skipped, exc.value.existing) == (3, 1)
        assert store.pods() == {"keep"}
        report = store.import_checkpoint(bad)  # kubelet's behaviour by default
        assert report.imported == 0 and len(report.skipped) == 3
        assert store.pods() == set()


def test_many_skips_are_summarised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = b"\xff\xff\xff"
    entries = [PodDevicesEntry(f"p{i}", "c", "r", None, bad) for i in range(30)]
    entries.append(PodDevicesEntry("ok", "c", "r", None, b""))
    path = tmp_path / "cp"
    write_checkpoint_file(str(path), dumps_checkpoint(entries, None))
    code, out, _ = run(capsys, "--db", tmp_path / "s.db", "import", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("imported 1 of 31 entries")
    assert (
        lines[1] == "skipped 30 entries whose AllocResp does not decode (kubelet skips them too):"
    )
    assert sum(line.startswith("  skipped entry ") for line in lines) == 20
    assert lines[-1] == "  ... and 10 more"
