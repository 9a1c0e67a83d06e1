"""The allocation history's hash chain: what makes an edited history detectable.

Every event of a store carries ``hash(n) = SHA-256(hash(n-1) ‖ canonical(event n))``; the
chain starts from :func:`genesis` of the store's ``store_id``, so a history is bound to the
identity it was written under (``podstore reset-identity`` re-chains a copy under its new id).

``canonical`` is a length-prefixed encoding of the event row's fields in a fixed order —
``seq`` (decimal), ``ts`` (the stored text, e.g. ``2026-12-02T10:32:00.000000Z``), ``op``,
``pod_uid``, ``container``, ``resource``, ``device_ids`` (the stored JSON text), ``released``
(the stored JSON text) — each field ``0x00`` when NULL, else ``0x01``, its UTF-8 length as 4
bytes big-endian, and the UTF-8 bytes. No field can run into the next, and the encoding needs
nothing but byte concatenation, so PostgreSQL recomputes it from the columns it keeps
(``sha256``, ``int4send``, ``convert_to``; the fleet's ``fleet_event_canonical``) and the two
sides agree byte for byte (tests pin both against fixed vectors).

The chain is tamper *evidence*, not a signature: anyone who can write the store file can
recompute every hash after an edit. What catches that is a copy held elsewhere — the fleet
database refuses a batch that does not continue the chain it holds, and ``podstore fleet
verify`` re-checks what it holds (docs/fleet.md, "Trust model").
"""

from __future__ import annotations

import hashlib

#: The chain format; a new format would get a new genesis tag.
VERSION = 1
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
