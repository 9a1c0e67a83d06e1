"""The history hash chain's byte rule (podstore/pure/chain.py), pinned against hashes computed
outside podstore (``printf … | sha256sum`` of the bytes the rule describes), so a change of
the encoding cannot pass unnoticed on both the node and the fleet side."""

from __future__ import annotations

from harness.chain_support import FIRST, GENESIS, STORE_ID

from podstore.pure import chain


def test_genesis_and_first_link_match_independent_vectors() -> None:
    g = chain.genesis(STORE_ID)
    assert g.hex() == GENESIS
    h = chain.link(
        g,
        1,
        "2026-12-04T10:00:00.000000Z",
        "insert",
        "p1",
        "c",
        "nvidia.com/gpu",
        '{"0":["GPU-0"]}',
        None,
    )
    assert h.hex() == FIRST
    assert len(h) == chain.HASH_BYTES


def test_fields_cannot_run_into_each_other() -> None:
    a = chain.canonical(1, "t", "insert", "ab", "c", "r", None, None)
    b = chain.canonical(1, "t", "insert", "a", "bc", "r", None, None)
    assert a != b
    # NULL and the empty string differ
    assert chain.canonical(1, "t", "op", None, None, "r", None, None) != chain.canonical(
        1, "t", "op", "", "", "r", None, None
    )


def test_length_prefix_counts_utf8_bytes() -> None:
    raw = chain.canonical(7, "t", "op", "pöd", None, "r", None, None)
    # "7" field, "t", "op", then 01 00000004 'pöd' (ö is two bytes)
    assert b"\x01\x00\x00\x00\x04p\xc3\xb6d" in raw
