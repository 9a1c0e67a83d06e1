"""The fast path of :mod:`.incremental` for the DRA manager's file in kubelet's data format.

``{"Data":"…","Checksum":N}`` whose ``Data`` is ``{"kind":…,"apiVersion":…,"Entries":[…]}``:
each claim of ``Entries`` is decoded by the very Go types of
:mod:`podstore.checkpoint.dra_state` into a fresh struct and turned into its item as
:func:`.dra.wanted` does.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from podstore.checkpoint.dra_state import _READ_DATA, _devices_have_share_id
from podstore.checkpoint.dra_types import claim_of
from podstore.checkpoint.gojson import fix_string
from podstore.checkpoint.gotypes import UINT32
from podstore.checkpoint.gotypes import Slice as SliceType
from podstore.storage.node import dra
from podstore.storage.node.delta import ItemsOf
from podstore.storage.node.escaped import scan_element, unescape
from podstore.storage.node.items import Item, Items, Key
from podstore.storage.node.members import (
    Fast,
    Last,
    MemberCache,
    Refused,
    Tables,
    expect,
    go_string,
    go_value,
    members,
    scan_string,
    scan_value,
)

_LIST = _READ_DATA.fields[2].type
assert isinstance(_LIST, SliceType)
_CLAIM = _LIST.elem

# A claim: its key, its item, whether its devices carry a ShareID key.
_Claim = tuple[Key, Item, bool]


def _claim(_key: str | None, value: Any) -> _Claim:
    c = claim_of(go_value(_CLAIM, _CLAIM.zero(), value))
    shares = _devices_have_share_id((("Entries", [value]),))
    return (None, None, dra.PREFIX + c.claim_uid), dra.claim_item(c, False), shares


def _claim_escaped(_key: str | None, found: tuple[Any, str]) -> tuple[Key, Item, bool, str]:
    value, unescaped = found
    return (*_claim(None, value), unescaped)


_ENTRIES = ',\\"Entries\\":'

#: The items of each table's members (a claim's).
ITEMS_OF: dict[str, ItemsOf] = {
    "Entries (escaped)": lambda claim: ((claim[0], claim[1]),),
    "Entries": lambda claim: ((claim[0], claim[1]),),
}


def read(text: str, tables: Tables, _last: Last) -> Fast:
    # Kubelet writes the file in ASCII (Go escapes nothing but quotes, backslashes, controls
    # and <>&): its claims are matched by their escaped text, and the Data string is never
    # unescaped whole. Anything else, or any doubt there, takes the unescaped path.
    if text.isascii():
        cache = tables("Entries (escaped)")
        try:
            return _read_escaped(text, cache)
        except Refused:
            cache.discard()
    return _read_unescaped(text, tables)


def _read_escaped(text: str, cache: MemberCache) -> Fast:
    """:func:`_read_unescaped`'s result from the escaped text (see :mod:`.escaped`)."""
    start = expect(text, 0, '{"Data":"')
    cut = text.find(_ENTRIES, start)
    if cut < 0:
        raise Refused
    head = unescape(text, start, cut)
    value, pos = scan_value(head, expect(head, 0, '{"kind":'))
    kind = go_string(value)
    value, pos = scan_value(head, expect(head, pos, ',"apiVersion":'))
    api_version = go_string(value)
    if pos != len(head):
        raise Refused
    claims: list[tuple[Key, Item, bool, str]] = []
    pos = members(
        text, cut + len(_ENTRIES), cache, _claim_escaped, claims, array=True, scan=scan_element
    )
    pos = expect(text, pos, '}","Checksum":')
    value, pos = scan_value(text, pos)
    stored: int = go_value(UINT32, 0, value)
    if expect(text, pos, "}") != len(text):
        raise Refused
    # The Data string's text, from its pieces: the head, the claims, the literal rest.
    data = "".join((head, ',"Entries":[', ",".join(map(itemgetter(3), claims)), "]}"))
    if not data.isascii():
        raise Refused  # escapes of non-ASCII text: Go's lone-surrogate rule is the other path's
    if zlib.crc32(data.encode("ascii")) != stored:
        raise Refused  # the full decoder raises the mismatch
    return _fast(data, kind, api_version, stored, claims)


def _fast(
    data: str, kind: str, api_version: str, stored: int, claims: Sequence[tuple[Any, ...]]
) -> Fast:
    items: Items = dict(map(itemgetter(0, 1), claims))
    if len(items) != len(claims):
        raise Refused  # a claim UID listed twice: the store keeps one, wanted() says so
    # As the full reader decides it: only a text that spells the key can have it.
    shares = any(map(itemgetter(2), claims)) and "shareid" in data.lower()
    form = {
        "entries_key": "Entries",
        "share_ids": shares,
        "kind": kind,
        "api_version": api_version,
        "claims_null": False,
    }
    return Fast("data", stored, True, items, form, {}, True)  # a claim listed twice: refused


def _read_unescaped(text: str, tables: Tables) -> Fast:
    raw, pos = scan_string(text, expect(text, 0, '{"Data":'))
    data = raw if raw.isascii() else fix_string(raw)
    value, pos = scan_value(text, expect(text, pos, ',"Checksum":'))
    stored: int = go_value(UINT32, 0, value)
    if expect(text, pos, "}") != len(text):
        raise Refused
    if zlib.crc32(data.encode("utf-8")) != stored:
        raise Refused  # the full decoder raises the mismatch
    value, pos = scan_value(data, expect(data, 0, '{"kind":'))
    kind = go_string(value)
    value, pos = scan_value(data, expect(data, pos, ',"apiVersion":'))
    api_version = go_string(value)
    claims: list[_Claim] = []
    pos = members(
        data, expect(data, pos, ',"Entries":'), tables("Entries"), _claim, claims, array=True
    )
    if expect(data, pos, "}") != len(data):
        raise Refused
    return _fast(data, kind, api_version, stored, claims)
