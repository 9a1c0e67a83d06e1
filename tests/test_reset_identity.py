"""``PodStore.reset_identity`` and ``podstore reset-identity``: a copied store takes a new
store_id and its whole history is re-chained from the new genesis, in one transaction; asked
without ``--yes``, on a read-only open, or over a broken chain, nothing changes."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness.chain_support import recompute
from harness.refmodel import table_dump

from podstore import PodStore, ReadOnlyStoreError, StoreCorruptError, check_store
from podstore.cli import main
from podstore.pure import chain

RES = "example.com/gpu"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture
def original(tmp_path: Path) -> Path:
    """A store with a history pruned in the middle and at the end (so it has links)."""
    path = tmp_path / "node-a.db"
    with PodStore.open(path) as store:
        for i in range(6):
            store.insert(f"p{i}", "c", RES, {0: [f"G{i}"]}, None)
        store.insert("p1", "c", RES, {0: ["G7"]}, None)
        store.delete(["p2"])
        store.insert("tail", "c", RES, {0: ["T"]}, None)
        store.delete(["tail"])
        store.prune_history(datetime.now(UTC) + timedelta(days=1))
        store.insert("p6", "c", RES, {0: ["G6"]}, None)
        store.prune_history(datetime.now(UTC) - timedelta(days=1))  # nothing: keeps a link
        store.delete(["p6"])
        store.insert("late", "c", RES, {0: ["L"]}, None)
        store.delete(["late"])
        store.prune_history(datetime.now(UTC) + timedelta(days=1))  # the newest go again
    return path


def _hashes(path: Path) -> tuple[dict[int, bytes], dict[int, bytes]]:
    conn = sqlite3.connect(path)
    try:
        return (
            dict(conn.execute("SELECT seq, hash FROM allocation_events").fetchall()),
            dict(conn.execute("SELECT seq, prev_hash FROM history_chain_links").fetchall()),
        )
    finally:
        conn.close()


def test_a_copy_gets_a_new_id_and_a_chain_of_its_own(original: Path, tmp_path: Path) -> None:
    copy = tmp_path / "node-c.db"
    shutil.copy(original, copy)
    with PodStore.open(original, readonly=True) as store:
        old_id, history = store.store_id, store.history()
    old_events, old_links = _hashes(copy)
    assert old_links, "the fixture has links"
    with PodStore.open(copy) as store:
        new_id = store.reset_identity()
        assert store.store_id == new_id != old_id
        assert uuid.UUID(new_id).version == 4
        assert store.history() == history  # content and seqs kept
        report = store.verify_history()
        assert report.ok and report.store_id == new_id
        store.insert("after", "c", RES, {0: ["A"]}, None)
        assert store.verify_history().ok
    new_events, new_links = _hashes(copy)
    assert set(old_links) == set(new_links) and set(old_events) < set(new_events)
    assert all(new_events[s] != old_events[s] for s in old_events)  # every hash changed
    assert all(new_links[s] != old_links[s] for s in old_links)
    recompute(copy)
    # the first kept event chains from a link holding the new genesis (nothing kept before it)
    first = min(old_events)
    if first > 1:
        assert new_links[first] == chain.genesis(new_id)
    assert check_store(copy) == []
    assert check_store(original) == []  # the original is untouched
    with PodStore.open(original, readonly=True) as store:
        assert store.store_id == old_id


def test_the_command_explains_without_yes_and_changes_nothing(
    original: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = table_dump(original)
    code, out, err = run(capsys, "--db", str(original), "reset-identity")
    assert code == 1 and out == ""
    assert "new store_id" in err and "--yes" in err and "nothing was changed" in err
    assert table_dump(original) == before
    code, out, err = run(capsys, "--db", str(original), "reset-identity", "--yes", "--readonly")
    assert code == 1 and err.startswith("podstore: error: --readonly") and out == ""
    assert table_dump(original) == before
    with PodStore.open(original, readonly=True) as store:
        old_id = store.store_id
        with pytest.raises(ReadOnlyStoreError):
            store.reset_identity()
    assert table_dump(original) == before
    code, out, _ = run(capsys, "--db", str(original), "reset-identity", "--yes")
    assert code == 0
    with PodStore.open(original, readonly=True) as store:
        assert out.startswith(f"store_id {store.store_id} (was {old_id})")
    assert run(capsys, "--db", str(original), "verify")[0] == 0


def test_a_missing_store_is_an_error_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    code, _, err = run(capsys, "--db", str(missing), "reset-identity", "--yes")
    assert code == 1 and err.startswith("podstore: error:")
    assert not missing.exists()


def test_a_broken_chain_is_refused_unchanged(
    original: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = sqlite3.connect(original)
    conn.execute("DROP TRIGGER tr_allocation_events_append_only")
    conn.execute("UPDATE allocation_events SET op = 'import' WHERE seq = (SELECT max(seq) FROM "
                 "allocation_events)")  # fmt: skip
    conn.commit()
    conn.close()
    before = table_dump(original)
    with PodStore.open(original) as store, pytest.raises(StoreCorruptError, match="hide"):
        store.reset_identity()
    assert table_dump(original) == before
    code, _, err = run(capsys, "--db", str(original), "reset-identity")
    assert code == 1 and "does not verify" in err


def test_the_append_only_trigger_survives(original: Path) -> None:
    with PodStore.open(original) as store:
        store.reset_identity()
    conn = sqlite3.connect(original)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE allocation_events SET hash = zeroblob(32)")
    finally:
        conn.close()
