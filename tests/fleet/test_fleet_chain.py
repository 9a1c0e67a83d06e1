"""The hash chain on the server: PostgreSQL recomputes every hash of a batch and refuses one
that does not continue the chain it holds; ``fleet verify`` re-checks what it holds and finds
every kind of central edit. Events here are made and hashed in the test (pure/chain.py), so
the server's rule is checked against the node's without a node store in between."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from harness.chain_support import FIRST, GENESIS, STORE_ID
from harness.fleetlib import chained, connect, entry_rows, rows, send_batch

from podstore.cli import cli
from podstore.fleet import read
from podstore.pure import chain


def test_canonical_bytes_match_the_rule_and_its_fixed_vectors(fleet_url: str) -> None:
    with connect(fleet_url) as conn:
        genesis = bytes(conn.execute("SELECT fleet_chain_genesis(%s)", (STORE_ID,)).fetchone()[0])
        assert genesis.hex() == GENESIS
        first = conn.execute(
            "SELECT sha256(%s || fleet_event_canonical(1, '2026-12-04T10:00:00.000000Z', "
            "'insert', 'p1', 'c', 'nvidia.com/gpu', %s, NULL))",
            (genesis, '{"0":["GPU-0"]}'),
        ).fetchone()[0]
        assert bytes(first).hex() == FIRST


def _random_text(rng: random.Random) -> str | None:
    if rng.random() < 0.2:
        return None
    alphabet = "abcXYZ019 -_./:'\"\\{}[],ößé€🎉\u202e\t"
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 40, 300])))


def test_canonical_bytes_match_rules_chain_on_random_events(fleet_url: str) -> None:
    rng = random.Random(20261205)
    cases = []
    for _ in range(300):
        ts = (
            f"{rng.randrange(1970, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T"
            f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}."
            f"{rng.randrange(1_000_000):06d}Z"
        )
        cases.append(
            (
                rng.choice([1, 2, 99, 10**6, 2**40]),
                ts,
                rng.choice(["insert", "replace", "delete", "registered"]),
                _random_text(rng),
                _random_text(rng),
                _random_text(rng) or "r",
                _random_text(rng),
                _random_text(rng),
            )
        )
    with connect(fleet_url) as conn:
        for case in cases:
            got = conn.execute(
                "SELECT fleet_event_canonical(%s, %s, %s, %s, %s, %s, %s, %s)", case
            ).fetchone()[0]
            assert bytes(got) == chain.canonical(*case), case


def _ship(url: str, store_id: str, rows_: list[tuple[Any, ...]], prev: bytes | None = None):  # type: ignore[no-untyped-def]
    events, head = chained(store_id, rows_, prev)
    with connect(url) as conn:
        start = chain.genesis(store_id) if prev is None else prev
        return send_batch(conn, store_id, "n1", events, start), head


def _store(url: str, store_id: str) -> dict[str, Any]:
    (row,) = rows(
        url,
        "SELECT last_seq, head_hash, events, entries, device_rows, refusals, last_refusal "
        "FROM fleet_stores WHERE store_id = CAST(:s AS uuid)",
        {"s": store_id},
    )
    names = ("last_seq", "head", "events", "entries", "device_rows", "refusals", "last_refusal")
    return dict(zip(names, row, strict=True))


def test_a_batch_that_continues_the_chain_is_taken_and_one_that_does_not_is_refused(
    fleet_url: str,
) -> None:
    sid = str(uuid.uuid4())
    (shipped, refused), head = _ship(fleet_url, sid, entry_rows(1, 30))
    assert (shipped, refused) == (30, None)
    store = _store(fleet_url, sid)
    assert (store["last_seq"], bytes(store["head"])) == (30, head)
    # Counters kept by the functions equal a count of what is held.
    assert store["events"] == 30
    assert (
        store["entries"]
        == rows(
            fleet_url,
            "SELECT count(*) FROM fleet_entries WHERE store_id = CAST(:s AS uuid)",
            {"s": sid},
        )[0][0]
    )
    assert (
        store["device_rows"]
        == rows(
            fleet_url,
            "SELECT count(*) FROM fleet_allocations WHERE store_id = CAST(:s AS uuid)",
            {"s": sid},
        )[0][0]
    )

    # The next events chained from another value (a clone that went its own way).
    other = chain.link(head, *entry_rows(31, 1)[0])
    (shipped, refused), _ = _ship(fleet_url, sid, entry_rows(31, 5), prev=other)
    assert shipped == 0 and refused is not None
    assert "refused" in refused and "diverged" in refused and "seq 30" in refused
    after = _store(fleet_url, sid)
    assert (after["last_seq"], after["events"], after["refusals"]) == (30, 30, 1)
    assert after["last_refusal"] == refused
    # The right chain still goes on.
    (shipped, refused), _ = _ship(fleet_url, sid, entry_rows(31, 5), prev=head)
    assert (shipped, refused) == (5, None)


def test_an_event_whose_hash_does_not_cover_its_content_is_refused_at_its_seq(
    fleet_url: str,
) -> None:
    sid = str(uuid.uuid4())
    events, _ = chained(sid, entry_rows(1, 20))
    events[11]["pod_uid"] = "someone-else"  # seq 12 edited after it was hashed
    with connect(fleet_url) as conn:
        shipped, refused = send_batch(conn, sid, "n1", events, chain.genesis(sid))
    assert shipped == 0 and refused is not None
    assert "diverged" in refused and "seq 12" in refused
    assert _store(fleet_url, sid)["events"] == 0
    assert rows(fleet_url, "SELECT count(*) FROM fleet_events") == [(0,)]


def test_a_batch_must_start_right_after_last_seq_without_a_hole(fleet_url: str) -> None:
    import psycopg

    sid = str(uuid.uuid4())
    (shipped, _), head = _ship(fleet_url, sid, entry_rows(1, 10))
    assert shipped == 10
    for bad in (
        entry_rows(12, 3),
        entry_rows(5, 10),
        entry_rows(11, 1) + entry_rows(13, 1),
        entry_rows(11, 2) + entry_rows(12, 1),  # a seq twice
    ):
        events, _ = chained(sid, bad, head)
        with connect(fleet_url) as conn, pytest.raises(psycopg.Error, match="without a hole"):
            send_batch(conn, sid, "n1", events, head)
    assert _store(fleet_url, sid)["last_seq"] == 10


def test_history_shipped_before_the_chain_is_adopted_on_the_nodes_word(fleet_url: str) -> None:
    sid = str(uuid.uuid4())
    # As revision f0001 left it: three events without hashes, last_seq 3.
    with connect(fleet_url) as conn:
        conn.execute(
            "INSERT INTO fleet_stores (store_id, node, last_seq, events) VALUES (%s, 'n1', 3, 3)",
            (sid,),
        )
        for seq in (1, 2, 3):
            conn.execute(
                "INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource, "
                "device_ids) VALUES (%s, %s, now(), 'insert', 'p', 'c', 'gpu', '{}')",
                (sid, seq),
            )
        conn.commit()
    anchor = bytes(range(32))  # whatever the node's chain stood at after seq 3
    (shipped, refused), _ = _ship(fleet_url, sid, entry_rows(4, 6), prev=anchor)
    assert (shipped, refused) == (6, None)
    assert rows(
        fleet_url,
        "SELECT seq, prev_hash, reason FROM fleet_chain_links WHERE store_id = CAST(:s AS uuid)",
        {"s": sid},
    ) == [(4, anchor, "adopted")]
    assert [r[0] for r in rows(fleet_url, "SELECT action FROM fleet_store_log")] == ["adopted"]
    (result,) = read.verify(fleet_url).dicts()
    assert (result["events"], result["chained"], result["problem"]) == (9, 6, None)


def _verify(url: str) -> dict[str, Any]:
    (only,) = read.verify(url).dicts()
    return only


# Each edit an owner of the database could make, and where verify must find it.
EDITS = [
    ('UPDATE fleet_events SET device_ids_text = \'{"0":["X"]}\' WHERE seq = 20', 20, "hash"),
    ('UPDATE fleet_events SET device_ids = \'{"0": ["X"]}\' WHERE seq = 25', 25, "differs"),
    ("UPDATE fleet_events SET devices = '{X}' WHERE seq = 26", 26, "differs"),
    ("UPDATE fleet_events SET ts = ts - interval '1 hour' WHERE seq = 5", 5, "hash"),
    ("UPDATE fleet_events SET op = 'replace' WHERE seq = 9", 9, "hash"),
    ("UPDATE fleet_events SET hash = sha256(hash) WHERE seq = 40", 40, "hash"),
    ("DELETE FROM fleet_events WHERE seq = 30", 31, "chains from nothing"),
    ("UPDATE fleet_events SET hash = NULL WHERE seq = 33", 33, "no hash"),
    ("UPDATE fleet_stores SET head_hash = sha256(head_hash)", 50, "head"),
    ("DELETE FROM fleet_events WHERE seq = 50", 50, "head"),
]


def test_fleet_verify_finds_every_central_edit(fleet_url: str) -> None:
    sid = str(uuid.uuid4())
    (shipped, _), _ = _ship(fleet_url, sid, entry_rows(1, 50))
    assert shipped == 50
    assert _verify(fleet_url)["problem"] is None
    for statement, seq, words in EDITS:
        with connect(fleet_url) as conn:
            conn.execute(statement)
            conn.commit()
            try:
                found = _verify(fleet_url)
                assert (found["first_broken_seq"], words in found["problem"]) == (seq, True), (
                    statement,
                    found,
                )
            finally:
                # Put the original back: ship the same events into a fresh copy of the store.
                conn.execute("DELETE FROM fleet_events")
                for table in ("fleet_entries", "fleet_allocations", "fleet_registered"):
                    conn.execute(f"DELETE FROM {table}")
                conn.execute("DELETE FROM fleet_double_allocated")
                conn.execute("DELETE FROM fleet_stores")
                conn.commit()
        (shipped, _), _ = _ship(fleet_url, sid, entry_rows(1, 50))
        assert shipped == 50 and _verify(fleet_url)["problem"] is None


def test_a_consistent_rewrite_passes_verify_but_the_node_is_then_refused(fleet_url: str) -> None:
    # What the chain cannot catch on its own: an owner who rewrites an event and recomputes
    # every hash after it (and the head). The node's next batch chains from the node's own
    # hash of seq 20, which the rewritten head is not: refused, diverged.
    sid = str(uuid.uuid4())
    (shipped, _), node_head = _ship(fleet_url, sid, entry_rows(1, 20))
    assert shipped == 20
    forged = entry_rows(1, 20)
    forged[9] = (*forged[9][:3], "intruder", *forged[9][4:])
    events, forged_head = chained(sid, forged)
    with connect(fleet_url) as conn:
        for e in events[9:]:
            conn.execute(
                "UPDATE fleet_events SET pod_uid = %s, hash = decode(%s, 'hex') "
                "WHERE store_id = %s AND seq = %s",
                (e["pod_uid"], e["hash"], sid, e["seq"]),
            )
        conn.execute("UPDATE fleet_stores SET head_hash = %s", (forged_head,))
        conn.commit()
    assert _verify(fleet_url)["problem"] is None
    (shipped, refused), _ = _ship(fleet_url, sid, entry_rows(21, 3), prev=node_head)
    assert shipped == 0 and refused is not None and "diverged" in refused


def test_fleet_verify_command_exit_status_and_node_filter(fleet_url: str) -> None:
    sids = [str(uuid.uuid4()) for _ in range(2)]
    for sid, node in zip(sids, ("n1", "n2"), strict=True):
        events, _ = chained(sid, entry_rows(1, 10))
        with connect(fleet_url) as conn:
            assert send_batch(conn, sid, node, events, chain.genesis(sid))[1] is None
    runner = CliRunner()
    ok = runner.invoke(cli, ["fleet", "verify", "--url", fleet_url, "-o", "json"])
    assert ok.exit_code == 0, ok.output
    assert [r["problem"] for r in json.loads(ok.output)] == [None, None]
    with connect(fleet_url) as conn:
        conn.execute(
            "UPDATE fleet_events SET resource = 'fpga' WHERE store_id = %s AND seq = 4", (sids[1],)
        )
        conn.commit()
    bad = runner.invoke(cli, ["fleet", "verify", "--url", fleet_url, "-o", "json"])
    assert bad.exit_code == 1
    out = json.loads(bad.stdout)
    assert [(r["node"], r["first_broken_seq"]) for r in out] == [("n1", None), ("n2", 4)]
    assert "1 of 2 stores have a broken chain" in bad.stderr
    only = runner.invoke(cli, ["fleet", "verify", "--url", fleet_url, "--node", "n1"])
    assert only.exit_code == 0 and "n2" not in only.output


def test_a_history_edited_on_the_node_is_refused_by_the_server(
    tmp_path: Path, fleet_url: str
) -> None:
    import sqlite3

    from harness.fleetlib import busy_node, fleet_event_seqs

    from podstore import FleetRefusedError, PodStore
    from podstore.fleet.ship import ship

    db = tmp_path / "n.db"
    with busy_node(db, seed=21) as store:
        first = ship(store, fleet_url, node="n")
        for i in range(5):
            store.insert(f"new-{i}", "c", "nvidia.com/gpu", {0: [f"GPU-new-{i}"]}, None)
        sid = store.store_id
    edited = first.last_seq + 3
    # Someone with the file rewrites an event not shipped yet (past the append-only trigger).
    with sqlite3.connect(db) as raw:
        triggers = [
            r[0]
            for r in raw.execute(
                "SELECT name FROM sqlite_master "
                "WHERE type = 'trigger' AND tbl_name = 'allocation_events'"
            )
        ]
        for name in triggers:
            raw.execute(f"DROP TRIGGER {name}")
        raw.execute(
            "UPDATE allocation_events SET pod_uid = 'someone-else' WHERE seq = ?", (edited,)
        )
    raw.close()
    node_verify = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert node_verify.exit_code == 1 and str(edited) in node_verify.output + str(
        node_verify.stderr_bytes or b""
    )
    with (
        PodStore.open(db, readonly=True, verify="off") as store,
        pytest.raises(FleetRefusedError) as info,
    ):
        ship(store, fleet_url, node="n")
    assert info.value.reason == "diverged" and f"seq {edited}" in str(info.value)
    assert fleet_event_seqs(fleet_url, sid)[-1] == first.last_seq  # nothing of the batch
