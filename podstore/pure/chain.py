"""The allocation history's hash chain: ``hash(n) = SHA-256(hash(n-1) ‖ canonical(event n))``
from the :func:`genesis` of the store's ``store_id`` (docs/sql.md, "The hash chain").

``canonical`` is plain byte concatenation so that PostgreSQL recomputes it byte for byte
(``fleet_event_canonical``; tests pin both to fixed vectors). Tamper evidence, not a signature:
the fleet's copy is the witness (docs/fleet.md, "Trust model").
"""

from __future__ import annotations

import hashlib

# A new chain format would get a new genesis tag.
_GENESIS_TAG = b"podstore-history-chain-v1\x00"

#: Bytes in a hash.
HASH_BYTES = 32

_NULL = b"\x00"
_PRESENT = b"\x01"


def genesis(store_id: str) -> bytes:
    """The hash before a store's first event: SHA-256 of the tag and the store_id's text."""
    return hashlib.sha256(_GENESIS_TAG + store_id.encode("ascii")).digest()


def canonical(
    seq: int,
    ts: str,
    op: str,
    pod_uid: str | None,
    container: str | None,
    resource: str,
    device_ids: str | None,
    released: str | None,
) -> bytes:
    """The bytes of one event that its hash covers (see the module docstring)."""
    out = bytearray()
    for value in (str(int(seq)), ts, op, pod_uid, container, resource, device_ids, released):
        if value is None:
            out += _NULL
        else:
            data = value.encode("utf-8")
            out += _PRESENT
            out += len(data).to_bytes(4, "big")
            out += data
    return bytes(out)


def link(
    prev: bytes,
    seq: int,
    ts: str,
    op: str,
    pod_uid: str | None,
    container: str | None,
    resource: str,
    device_ids: str | None,
    released: str | None,
) -> bytes:
    """``hash(n)`` from ``hash(n-1)`` and event n's fields."""
    return hashlib.sha256(
        prev + canonical(seq, ts, op, pod_uid, container, resource, device_ids, released)
    ).digest()
