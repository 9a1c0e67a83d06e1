"""A history edited from outside podstore (the sqlite3 module on the store file) is caught by
``podstore verify`` and ``PodStore.verify_history``, naming the first broken seq and what is
wrong; the untouched store and a pruned one pass.

Each case edits one thing of one event in the middle of a chained history (seq 5 of 9 — see
``history``), runs the command line in a child process and reads its exit code and report.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness.scale_store import podstore_argv

from podstore import PodStore
from podstore.pure import chain

RES = "example.com/gpu"
NEW_ID = "00000000-0000-4000-8000-000000000000"
UNLOCK = "DROP TRIGGER tr_allocation_events_append_only"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Nine events: seq 5 replaces p1's devices (released G1); seq 9 is a registered event."""
    path = tmp_path_factory.mktemp("tamper") / "clean.db"
    with PodStore.open(path) as store:
        for i in range(4):
            store.insert(f"p{i}", "c", RES, {0: [f"G{i}"]}, None)  # 1..4
        store.insert("p1", "c", RES, {0: ["G9"]}, None)  # 5: replace, released G1
        store.insert("p4", "c", RES, {-1: ["G4"]}, None)  # 6
        store.delete(["p2"])  # 7
        store.insert("p5", "c", RES, {0: ["G5"]}, None)  # 8
        store.set_registered_devices({RES: ["G0", "G9"]})  # 9
        assert store.history()[4].released == ["G1"]
    return path


def verify(db: Path, *args: str) -> tuple[int, list[dict[str, str]]]:
    run = subprocess.run(
        podstore_argv("--db", str(db), "verify", "-o", "json", *args),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode in (0, 1), run.stderr
    return run.returncode, json.loads(run.stdout)


def tampered(history: Path, tmp_path: Path, *statements: str) -> Path:
    db = tmp_path / "tampered.db"
    shutil.copy(history, db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")  # an edit from outside: nothing cascades
        for sql in statements:
            cur = conn.execute(sql)
            assert sql.startswith("DROP") or cur.rowcount > 0, sql
    finally:
        conn.close()
    return db


def chain_findings(findings: list[dict[str, str]]) -> list[str]:
    return [f["message"] for f in findings if f["check"] == "history-chain"]


def test_the_untouched_store_passes(history: Path) -> None:
    assert verify(history) == (0, [])
    with PodStore.open(history, readonly=True) as store:
        report = store.verify_history()
    assert report.ok and report.events == 9 and report.head_seq == 9
    assert report.first_broken_seq is None and len(report.head_hash) == 32


def test_a_dropped_append_only_trigger_is_reported(history: Path, tmp_path: Path) -> None:
    """The chain still catches a later edit, but the guard against one is gone: a warning,
    so ``verify --strict`` fails."""
    db = tampered(history, tmp_path, UNLOCK)
    code, findings = verify(db)
    assert code == 0
    assert [(f["severity"], f["check"]) for f in findings] == [("warning", "schema")]
    assert "tr_allocation_events_append_only is missing" in findings[0]["message"]
    assert verify(db, "--strict") == (1, findings)


CASES = {
    "ts": (
        [UNLOCK, "UPDATE allocation_events SET ts = '2020-01-01T00:00:00.000000Z' WHERE seq = 5"],
        "seq 5 (edited)",
    ),
    "device_ids": (
        [UNLOCK, """UPDATE allocation_events SET device_ids = '{"0":["G8"]}' WHERE seq = 5"""],
        "seq 5 (edited)",
    ),
    "op": ([UNLOCK, "UPDATE allocation_events SET op = 'import' WHERE seq = 5"], "seq 5 (edited)"),
    "released": (
        [UNLOCK, "UPDATE allocation_events SET released = NULL WHERE seq = 5"],
        "seq 5 (edited)",
    ),
    "pod_uid": (
        [UNLOCK, "UPDATE allocation_events SET pod_uid = 'p3' WHERE seq = 5"],
        "seq 5 (edited)",
    ),
    "hash": (
        [UNLOCK, "UPDATE allocation_events SET hash = zeroblob(32) WHERE seq = 5"],
        "seq 5 (hash-edited)",
    ),
    "middle event deleted": (
        ["DELETE FROM allocation_events WHERE seq = 5"],
        "seq 6 (removed): events 5..5 are missing",
    ),
    "forged link": (
        ["INSERT INTO history_chain_links (seq, prev_hash) SELECT 5, hash FROM allocation_events "
         "WHERE seq = 4"],
        "seq 5 (link-forged)",
    ),
    "store_id": (
        [f"UPDATE store_meta SET value = '{NEW_ID}' WHERE key = 'store_id'"],
        "seq 1 (genesis)",
    ),
    "floor raised": (
        ["INSERT INTO store_meta (key, value) VALUES ('history_seq_floor', '12')"],
        "seq 12 (head)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_edit_is_caught_naming_the_seq(history: Path, tmp_path: Path, case: str) -> None:
    statements, words = CASES[case]
    db = tampered(history, tmp_path, *statements)
    code, findings = verify(db)
    assert code == 1, findings
    messages = chain_findings(findings)
    assert messages and words in messages[0], findings
    with PodStore.open(db, readonly=True) as store:
        report = store.verify_history()
    assert not report.ok
    assert report.first_broken_seq == int(words.split()[1])
    assert report.breaks[0].kind == words.split("(")[1].split(")")[0]


def test_an_edit_re_hashed_by_the_rule_is_caught_at_the_next_event(
    history: Path, tmp_path: Path
) -> None:
    """Whoever knows the rule can re-hash the event they edit; the next event, which chains
    from the old hash, gives it away (unless every later hash is rewritten too: then only a
    copy held elsewhere, the fleet's, tells)."""
    conn = sqlite3.connect(history)
    (prev,) = conn.execute("SELECT hash FROM allocation_events WHERE seq = 4").fetchone()
    row = conn.execute(
        "SELECT seq, ts, op, pod_uid, container, resource, device_ids, released "
        "FROM allocation_events WHERE seq = 5"
    ).fetchone()
    conn.close()
    forged = chain.link(prev, *row[:6], '{"0":["G8"]}', row[7])
    db = tampered(
        history,
        tmp_path,
        UNLOCK,
        f"""UPDATE allocation_events SET device_ids = '{{"0":["G8"]}}', hash = x'{forged.hex()}'
            WHERE seq = 5""",
    )
    code, findings = verify(db)
    assert code == 1
    messages = chain_findings(findings)
    assert "seq 6 (edited)" in messages[0] and "seq 5" in messages[0], messages


def test_a_deleted_event_and_a_link_written_as_prune_would_is_not_caught(
    history: Path, tmp_path: Path
) -> None:
    """The limit of tamper evidence on the node: an edit that does what prune_history does
    looks like a prune (what names the devices of an event goes with the event: the device
    spans show only the pairs of kept events). The fleet database, which holds the events it
    was shipped, is the witness for that (docs/fleet.md)."""
    db = tampered(
        history,
        tmp_path,
        "INSERT INTO history_chain_links (seq, prev_hash) SELECT 6, hash FROM allocation_events "
        "WHERE seq = 5",
        "DELETE FROM allocation_events WHERE seq = 5",
    )
    assert verify(db) == (0, [])


def test_after_prune_history_verify_passes_and_an_edit_is_still_caught(
    history: Path, tmp_path: Path
) -> None:
    db = tmp_path / "pruned.db"
    shutil.copy(history, db)
    with PodStore.open(db) as store:
        assert store.prune_history(datetime.now(UTC) + timedelta(days=1)) > 0
        kept = [e.seq for e in store.history()]
    assert verify(db) == (0, [])
    assert kept != list(range(1, 10))
    conn = sqlite3.connect(db)
    links = conn.execute("SELECT seq FROM history_chain_links ORDER BY seq").fetchall()
    conn.close()
    assert links
    edited = tampered(
        db,
        tmp_path,
        "UPDATE history_chain_links SET prev_hash = zeroblob(32) WHERE rowid = "
        "(SELECT min(rowid) FROM history_chain_links)",
    )
    code, findings = verify(edited)
    assert code == 1
    assert f"seq {links[0][0]} (link-wrong)" in chain_findings(findings)[0]
