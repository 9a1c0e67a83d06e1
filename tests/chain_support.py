"""Checking a store's hash chain from outside podstore's verifier (shared by the chain tests)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from podstore.rules import chain
from podstore.storage import events


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
