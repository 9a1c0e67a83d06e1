"""The device checkpoint's top-level ``BootID`` (kubernetes PR #137919, in no release): kept by
import and sync, written back by export unless ``--boot-id`` gives another."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from podstore import PodStore
from podstore.checkpoint import dumps_checkpoint, read_checkpoint

VECTORS = Path(__file__).parent / "vectors"
WITH_BOOT_ID = VECTORS / "v2-bootid.json"
WITHOUT = VECTORS / "v2-small.json"


def podstore(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podstore", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(*args: str | Path, cwd: Path) -> str:
    res = podstore(*args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res.stdout


def boot_id_of(path: Path) -> str | None:
    return read_checkpoint(path).boot_id


def test_import_then_export_keeps_the_boot_id_byte_for_byte(tmp_path: Path) -> None:
    assert boot_id_of(WITH_BOOT_ID)
    ok("import", WITH_BOOT_ID, cwd=tmp_path)
    ok("export", tmp_path / "out", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == WITH_BOOT_ID.read_bytes()


def test_boot_id_option_overrides_the_kept_one(tmp_path: Path) -> None:
    ok("import", WITH_BOOT_ID, cwd=tmp_path)
    ok("export", tmp_path / "out", "--boot-id", "b0a7-new-boot", cwd=tmp_path)
    written = read_checkpoint(tmp_path / "out")
    original = read_checkpoint(WITH_BOOT_ID)
    assert written.boot_id == "b0a7-new-boot"
    # BootID is outside Data and not hashed: the rest is the file's.
    assert written.checksum == original.checksum
    assert json.loads((tmp_path / "out").read_bytes())["BootID"] == "b0a7-new-boot"


def test_an_empty_boot_id_option_writes_none(tmp_path: Path) -> None:
    ok("import", WITH_BOOT_ID, cwd=tmp_path)
    ok("export", tmp_path / "out", "--boot-id", "", cwd=tmp_path)
    assert boot_id_of(tmp_path / "out") is None
    assert "BootID" not in json.loads((tmp_path / "out").read_bytes())


def test_a_file_without_boot_id_exports_without_one(tmp_path: Path) -> None:
    ok("import", WITHOUT, cwd=tmp_path)
    ok("export", tmp_path / "out", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == WITHOUT.read_bytes()


def test_a_replacing_import_without_boot_id_forgets_the_kept_one(tmp_path: Path) -> None:
    ok("import", WITH_BOOT_ID, cwd=tmp_path)
    ok("import", WITHOUT, cwd=tmp_path)
    ok("export", tmp_path / "out", cwd=tmp_path)
    assert (tmp_path / "out").read_bytes() == WITHOUT.read_bytes()


def test_a_merge_keeps_the_boot_id_unless_the_file_has_one(tmp_path: Path) -> None:
    """A merge puts the file's values over the store's: a file with no BootID leaves the
    store's, a file with one replaces it."""
    ok("import", WITH_BOOT_ID, cwd=tmp_path)
    kept = boot_id_of(WITH_BOOT_ID)
    ok("import", "--merge", WITHOUT, cwd=tmp_path)
    ok("export", tmp_path / "a", cwd=tmp_path)
    assert boot_id_of(tmp_path / "a") == kept
    other = tmp_path / "other-boot"
    cp = read_checkpoint(WITHOUT)
    other.write_bytes(dumps_checkpoint(cp.entries[:1], {}, "another-boot"))
    ok("import", "--merge", other, cwd=tmp_path)
    ok("export", tmp_path / "b", cwd=tmp_path)
    assert boot_id_of(tmp_path / "b") == "another-boot"


def test_sync_keeps_the_file_boot_id(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "s.db") as store:
        store.sync_checkpoint(WITH_BOOT_ID)
        store.export_checkpoint(tmp_path / "a")
        assert (tmp_path / "a").read_bytes() == WITH_BOOT_ID.read_bytes()
        report = store.sync_checkpoint(WITHOUT)
        assert report.boot_id is None
        store.export_checkpoint(tmp_path / "b")
        assert boot_id_of(tmp_path / "b") is None
        # The same entries again, now with a BootID: only the kept BootID changes.
        again = tmp_path / "again"
        cp = read_checkpoint(WITHOUT)
        again.write_bytes(dumps_checkpoint(cp.entries, cp.registered_devices, "b-2"))
        store.sync_checkpoint(again)
        store.export_checkpoint(tmp_path / "c")
        assert (tmp_path / "c").read_bytes() == again.read_bytes()
        assert store.export_checkpoint(tmp_path / "d", boot_id="given").entries == len(cp.entries)
        assert boot_id_of(tmp_path / "d") == "given"
