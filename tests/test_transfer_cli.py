"""``podstore import``, ``export`` and ``verify-checkpoint`` as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.cli import column, on_a_terminal, without_paths

from podstore import PodStore
from podstore.cli.checkpoint import SKIPPED_SHOWN

VECTORS = Path(__file__).parent / "vectors"
EXAMPLE = Path(__file__).parent.parent / "examples" / "kubelet_internal_checkpoint"


def podstore(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from podstore.cli import main; main()", *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_then_export_round_trips(tmp_path: Path) -> None:
    res = podstore("import", VECTORS / "v2-small.json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "imported 11 of 11 entries" in res.stdout
    assert (tmp_path / "podstore.db").exists()
    res = podstore("export", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "exported 11 entries" in res.stdout
    assert (tmp_path / "out").read_bytes() == (VECTORS / "v2-small.json").read_bytes()


def test_export_says_what_it_left_out(tmp_path: Path) -> None:
    """Entries without an allocation response are not in the file (kubelet writes only those
    with one): the file keeps kubelet's bytes, and the command counts and names the rest."""
    db = tmp_path / "s.db"
    with PodStore.open(db) as s:
        s.insert("pod-uid-1", "trainer", "nvidia.com/gpu", {0: ["GPU-1"]}, b"")
        for i in range(SKIPPED_SHOWN + 2):
            s.insert(f"pod-uid-{i + 2}", "c", "nvidia.com/gpu", {-1: [f"GPU-{i + 2}"]}, None)
        s.export_checkpoint(tmp_path / "api")
    res = podstore("--db", db, "export", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"exported 1 entries to {tmp_path / 'out'}"
    assert lines[1] == (
        f"left out {SKIPPED_SHOWN + 2} entries without an allocation response "
        "(kubelet writes only entries with one):"
    )
    assert lines[2].startswith("  left out entry 1 (pod-uid-2/c/nvidia.com/gpu): no allocation")
    assert lines[-1] == "  ... and 2 more" and len(lines) == 2 + SKIPPED_SHOWN + 1
    assert (tmp_path / "out").read_bytes() == (tmp_path / "api").read_bytes()


def test_bundled_example_is_a_valid_checkpoint(tmp_path: Path) -> None:
    res = podstore("--db", tmp_path / "x.db", "import", EXAMPLE, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with PodStore.open(tmp_path / "x.db", readonly=True) as s:
        assert s.size() == 3


def test_import_uses_podstore_db_env(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    res = podstore(
        "import", VECTORS / "real-tegra.json", cwd=tmp_path, env={"PODSTORE_DB": str(db)}
    )
    assert res.returncode == 0, res.stderr
    with PodStore.open(db, readonly=True) as s:
        assert s.pods() == {"bf52b2cd-b611-4e79-86b1-280b283185c3"}
    assert not (tmp_path / "podstore.db").exists()


def test_import_merge_and_boot_id_export(tmp_path: Path) -> None:
    assert podstore("import", VECTORS / "v2-small.json", cwd=tmp_path).returncode == 0
    res = podstore("import", "--merge", VECTORS / "real-tegra.json", cwd=tmp_path)
    assert res.returncode == 0 and "; merged]" in without_paths(res.stdout, VECTORS)
    with PodStore.open(tmp_path / "podstore.db", readonly=True) as s:
        assert s.size() == 4
    res = podstore("export", "--boot-id", "abc", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 0
    assert (tmp_path / "out").read_bytes().endswith(b',"BootID":"abc"}')


def test_import_reports_skipped_entries_and_strict_refuses(tmp_path: Path) -> None:
    res = podstore("import", VECTORS / "corrupt-garbage-allocresp.json", cwd=tmp_path)
    assert res.returncode == 0
    assert "imported 10 of 11" in res.stdout
    # The skips are part of the report, on stdout.
    assert "skipped 1 entry whose AllocResp does not decode" in res.stdout
    assert "skipped entry 0" in res.stdout
    assert res.stderr == ""
    res = podstore("import", "--strict", VECTORS / "hand-odd-strings.json", cwd=tmp_path)
    assert res.returncode == 1
    assert "strict import refuses" in without_paths(res.stderr, VECTORS)
    # The refused import changed nothing.
    with PodStore.open(tmp_path / "podstore.db", readonly=True) as s:
        assert s.size() == 3


def test_import_of_a_corrupt_file_fails_cleanly(tmp_path: Path) -> None:
    res = podstore("import", VECTORS / "corrupt-flip-checksum.json", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.startswith("podstore: error:")
    # The file's name holds "checksum" too: look at the message only.
    assert "stored checksum" in without_paths(res.stderr, VECTORS)
    assert "Traceback" not in res.stderr


def test_verify_checkpoint_table_and_exit_codes(tmp_path: Path) -> None:
    res = podstore(
        "verify-checkpoint", VECTORS / "v2-small.json", VECTORS / "v1-small.json", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert column(res.stdout, "STATUS") == ["OK", "OK"]
    res = podstore(
        "verify-checkpoint",
        VECTORS / "v2-small.json",
        VECTORS / "corrupt-flip-checksum.json",
        VECTORS / "corrupt-truncated.json",
        cwd=tmp_path,
    )
    assert res.returncode == 1
    assert column(res.stdout, "STATUS") == ["OK", "MISMATCH", "UNREADABLE"]


@pytest.mark.parametrize("fmt", ["json", "yaml", "csv", "table"])
def test_verify_checkpoint_output_formats(tmp_path: Path, fmt: str) -> None:
    res = podstore(
        "verify-checkpoint",
        "-o",
        fmt,
        VECTORS / "v1-small.json",
        VECTORS / "corrupt-flip-checksum.json",
        cwd=tmp_path,
    )
    assert res.returncode == 1
    if fmt == "json":
        rows = json.loads(res.stdout)
        assert [r["status"] for r in rows] == ["OK", "MISMATCH"]
        assert rows[0]["format"] == "v1" and rows[0]["entries"] == 9
        assert rows[0]["stored"] == rows[0]["computed"] == 1323978195
        assert rows[1]["stored"] == 1616683355 and rows[1]["computed"] == 1616683350
    elif fmt == "csv":
        lines = res.stdout.splitlines()
        assert lines[0] == (
            "file,kind,status,format,entries,stored,computed,error,"
            "kubelet_version,verdict,read_as,drops,accepted_by"
        )
        assert lines[1].split(",")[1:7] == [
            "devices",
            "OK",
            "v1",
            "9",
            "1323978195",
            "1323978195",
        ]
    elif fmt == "yaml":
        assert "status: MISMATCH" in res.stdout
    else:
        assert column(res.stdout, "STATUS") == ["OK", "MISMATCH"]


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    assert podstore("import", cwd=tmp_path).returncode == 2
    assert (
        podstore(
            "verify-checkpoint", "-o", "xml", VECTORS / "v2-small.json", cwd=tmp_path
        ).returncode
        == 2
    )


def test_progress_barson_a_terminal(tmp_path: Path) -> None:
    code, err = on_a_terminal(["import", str(VECTORS / "v2-large.json")], tmp_path)
    assert code == 0, err
    assert "decoding entries" in err and "100%" in err
    code, err = on_a_terminal(["export", str(tmp_path / "out")], tmp_path)
    assert code == 0, err
    assert "reading entries" in err and "100%" in err
    assert (tmp_path / "out").read_bytes() == (VECTORS / "v2-large.json").read_bytes()


def test_progress_callbacks(tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    with PodStore.open(tmp_path / "p.db") as s:
        s.import_checkpoint(
            VECTORS / "v2-large.json", progress=lambda d, t: seen.append(("import", d, t))
        )
        s.export_checkpoint(tmp_path / "out", progress=lambda d, t: seen.append(("export", d, t)))
    assert seen[-1] == ("export", 1010, 1010)
    assert ("import", 1010, 1010) in seen
    assert ("export", 1000, 1010) in seen
