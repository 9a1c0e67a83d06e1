"""Checking a store's hash chain from outside podstore's verifier (shared by the chain tests)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from podstore.pure import chain
from podstore.storage import events

# Vectors of the chain's byte rule, computed outside podstore (tests/test_chain_rule.py says how).
STORE_ID = "0b8f3c1e-1111-4222-8333-444455556666"
# printf 'podstore-history-chain-v1\x00%s' "$STORE_ID" | sha256sum
GENESIS = "ea2ec3e6524f2f6e70d86fb352949a9cc55b1826cb7560843f24ee92cded0f2b"
# genesis ‖ 01 len "1" ‖ 01 len ts ‖ 01 len "insert" ‖ 01 len "p1" ‖ 01 len "c"
#         ‖ 01 len "nvidia.com/gpu" ‖ 01 len '{"0":["GPU-0"]}' ‖ 00, through sha256sum
FIRST = "989504b67834710e792a4f9c76663b9309db12202523eaa19c462dbef73d981e"


def connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def recompute(path: Path) -> list[int]:
    """Check every kept event's hash from the rule and what it chains from; return the seqs.
    Links must stand exactly where a predecessor is missing."""
    conn = connect_ro(path)
    try:
        (store_id,) = conn.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()
        links = dict(conn.execute("SELECT seq, prev_hash FROM history_chain_links").fetchall())
        rows = conn.execute(
            "SELECT seq, ts, op, pod_uid, container, resource, device_ids, released, hash "
            "FROM allocation_events ORDER BY seq"
        ).fetchall()
        high_water = conn.execute(
            "SELECT max(coalesce((SELECT max(seq) FROM allocation_events), 0), coalesce(("
            "SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = 'history_seq_floor'), 0))"
        ).fetchone()[0]
        prev_seq, prev = 0, chain.genesis(store_id)
        for seq, *fields, digest in rows:
            if seq == 1:
                base = chain.genesis(store_id)
                assert seq not in links
            elif seq == prev_seq + 1:
                base = prev
                assert seq not in links, f"a link at {seq} although {seq - 1} is kept"
            else:
                base = links.pop(seq)
            assert digest == chain.link(base, seq, *fields), f"seq {seq}"
            assert events.prev_hash(conn, seq) == base
            prev_seq, prev = seq, digest
        # What is left: at most the link for the seq after the newest, when that one is gone.
        if high_water > prev_seq:
            assert set(links) == {high_water + 1}
            assert events.head(conn) == (high_water, links[high_water + 1])
        else:
            assert links == {}
            assert events.head(conn) == (high_water, prev)
        return [r[0] for r in rows]
    finally:
        conn.close()
