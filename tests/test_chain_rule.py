"""The history hash chain's byte rule (podstore/rules/chain.py), pinned against hashes computed
outside podstore (``printf … | sha256sum`` of the bytes the rule describes), so a change of
the encoding cannot pass unnoticed on both the node and the fleet side."""

from __future__ import annotations

from podstore.rules import chain

STORE_ID = "0b8f3c1e-1111-4222-8333-444455556666"
# printf 'podstore-history-chain-v1\x00%s' "$STORE_ID" | sha256sum
GENESIS = "ea2ec3e6524f2f6e70d86fb352949a9cc55b1826cb7560843f24ee92cded0f2b"
# genesis ‖ 01 len "1" ‖ 01 len ts ‖ 01 len "insert" ‖ 01 len "p1" ‖ 01 len "c"
#         ‖ 01 len "nvidia.com/gpu" ‖ 01 len '{"0":["GPU-0"]}' ‖ 00, through sha256sum
FIRST = "989504b67834710e792a4f9c76663b9309db12202523eaa19c462dbef73d981e"


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
