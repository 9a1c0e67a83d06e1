"""The members of one JSON object or array of a node file, each converted once per exact text.

Kubelet rewrites its CPU, memory and DRA files whole, but a rewrite changes a few pod entries,
claims or NUMA nodes at most. A member of an object (``"uid":{…}``) or an element of an
array (``{"ClaimUID":…}``) decodes into a fresh value (Go's map and fresh-slice decoding), so
what it decodes to, and the items it gives, depend on nothing but its own JSON text:
:class:`MemberCache` keeps that per exact text for the members of the last file read.

Finding a member in a new file needs no parse. Most members are the last file's, in its
order: the longest stretch of the new text equal to a run of them, commas included, is found
by a few comparisons (:meth:`MemberCache.run`). Otherwise the text up to a member's *head*
(an object member's key, up to ``":``; an array element's first field, up to ``",``) names
the last file's member that started so, and the new text at that position either starts
with that member's whole text or not. A member is taken only where a comma or the closing
bracket follows it, where every JSON value ends, so text equal to a member scanned before
*is* that member, wherever the guess came from. Anything else — a new member, a changed one,
a key holding ``":`` — is scanned by the C scanner of the very decoder ``gojson.parse`` uses
(same hooks, same values), so the slices are the scanner's own boundaries, never a decoded
value's (``1``, ``1.0`` and ``true`` compare equal in Python).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, itemgetter
from typing import Any

from podstore.checkpoint import gojson
from podstore.checkpoint.godecode import DecodeError, decode_value
from podstore.checkpoint.gotypes import STRING, GoType
from podstore.storage.node.items import Item, Items, Key

# The scanners of the decoder gojson.parse uses; typeshed declares neither.
_SCAN: Callable[[str, int], tuple[Any, int]] = gojson._DECODER.scan_once  # type: ignore[attr-defined]
_STRING: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Fast:
    """What a fast read of a file gives: what ``PreparedNode`` holds (version, checksum,
    verified, items, form), the items of the keys outside every member (``fixed``, listed
    after the members' in ``items``), and whether every key came from one member (or is
    fixed) only (``unique``, see :mod:`.delta`)."""

    version: str
    checksum: int
    verified: bool
    items: Mapping[Key, Item]
    form: dict[str, Any]
    fixed: Items
    unique: bool


@dataclass(slots=True)
class Last:
    """What the reads of one file keep of the last fast read besides its members: its
    generation when its keys were unique (:mod:`.delta`), and what its kind's reader keeps
    of it (``summary``; None: nothing); and how many reads had to unescape a whole string
    their file also holds unescaped (``unescaped``, CPU v4's ``data``)."""

    generation: int | None = None
    summary: Any = None
    unescaped: int = 0


#: The member cache of a table by its name (``entries``, ``podEntries``, …).
Tables = Callable[[str], "MemberCache"]

#: Converts one member (its key, or None for an array element, and its parsed value) into
#: what the cache keeps; raises anything when the full decoder must have the file.
Convert = Callable[[str | None, Any], Any]


class Refused(Exception):
    """The fast path cannot take this file in full; the full decoder reads it."""


#: One member: its head, its exact text, what it converted to.
Member = tuple[str, str, Any]
#: Finds the member no earlier file had at ``pos`` (text, pos, head, convert, array).
Scan = Callable[[str, int, str, Convert, bool], Member]


#: A stretch of a read's members: a run ``i…j-1`` of the last file's (a ``range``), or one
#: member no earlier file had.
Piece = range | Member


@dataclass
class MemberCache:
    """The converted members of the last file read, in its order (``order``): their texts
    joined by commas as they stood there (``body``, where member ``k`` ends one character
    before ``ends[k]``), and where each head is (``index``, a guide only: every member found
    is compared by its text). ``new`` collects this read's members, which replace them only
    when the read succeeds (``changed``: the body and ends are built again), and ``pieces``
    how this read's members came: runs of the last file's, and members scanned (``fresh``);
    :meth:`dropped` are the last file's members not found again.

    ``ebody`` / ``eends``: the body as a JSON string escapes it (``"`` and ``\\`` with a
    backslash; None: not known), with its members' ends, for a reader that checks a string
    against text it read unescaped (:mod:`.escaped`); it sets ``escaped`` to the new ones.
    """

    order: list[Member] = field(default_factory=list)
    body: str = ""
    ends: list[int] = field(default_factory=list)
    index: dict[str, int] | None = None
    ebody: str | None = ""
    eends: list[int] = field(default_factory=list)
    new: list[Member] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    span: tuple[str, int, int] = ("", 0, 0)
    escaped: tuple[str, list[int]] | None = None
    changed: bool = False
    hits: int = 0
    misses: int = 0

    def commit(self) -> None:
        new = self.new
        if self.changed or len(new) != len(self.order):
            # The members stand in the text read, joined by commas: the body is a slice of it,
            # and the ends of runs of the last file's members are theirs, shifted.
            text, start, end = self.span
            self.body = text[start:end]
            self.ends = rebuild_ends(self.pieces, self.ends, _raw_len)
            self.index = None
            if self.escaped is None:
                self.ebody = None
        if self.escaped is not None:
            self.ebody, self.eends = self.escaped
        self.order = new
        self.discard()

    def find(self, head: str) -> int:
        """Where the last file's member whose head is ``head`` was (-1: none)."""
        if self.index is None:
            self.index = dict(zip(map(_HEAD, self.order), range(len(self.order)), strict=True))
        return self.index.get(head, -1)

    def discard(self) -> None:
        self.new, self.changed, self.pieces = [], False, []
        self.span, self.escaped = ("", 0, 0), None

    @property
    def fresh(self) -> list[Member]:
        """This read's members no earlier file had (before :meth:`commit`)."""
        return [p for p in self.pieces if not isinstance(p, range)]

    def dropped(self) -> list[Member]:
        """The last file's members this read has not found again (before :meth:`commit`)."""
        out: list[Member] = []
        at = 0
        for r in sorted((p.start, p.stop) for p in self.pieces if isinstance(p, range)):
            out += self.order[at : r[0]]
            at = max(at, r[1])
        out += self.order[at:]
        return out

    def run(self, text: str, pos: int, i: int) -> int:
        """The end ``j`` of the longest run of members ``i…j-1`` of the last file, in its
        order, that ``text`` holds at ``pos`` (``i``: none). Gallops, then halves: a few
        comparisons of whole stretches of text for a run of any length."""
        body, ends, n = self.body, self.ends, len(self.order)
        start = ends[i - 1] if i else 0

        def holds(j: int) -> bool:
            return text.startswith(body[start : ends[j - 1] - 1], pos)

        good, step = i, 1
        while True:
            j = min(i + step, n)
            if not holds(j):
                break
            good = j
            if j == n:
                return n
            step *= 2
        # good holds, j does not: the longest run ends between them.
        while j - good > 1:
            mid = (good + j) // 2
            if holds(mid):
                good = mid
            else:
                j = mid
        return good


_HEAD = itemgetter(0)
_RAW = itemgetter(1)
_VALUE = itemgetter(2)


def _raw_len(member: Member) -> int:
    return len(member[1])


def rebuild_ends(
    pieces: list[Piece], ends: list[int], length: Callable[[Member], int]
) -> list[int]:
    """The ends of a read's members in its body (as ``MemberCache.ends``) from how they came:
    a run of the last file's keeps its ends there, shifted; a new member's is its ``length``
    (and the comma) past the end before it."""
    out: list[int] = []
    pos = 0
    for p in pieces:
        if isinstance(p, range):
            if p:
                start = ends[p.start - 1] if p.start else 0
                out += map(add, ends[p.start : p.stop], repeat(pos - start))
                pos = out[-1]
        else:
            pos += length(p) + 1
            out.append(pos)
    return out


def scan_value(text: str, pos: int) -> tuple[Any, int]:
    """One JSON value at ``pos`` as ``gojson.parse`` parses it, and where it ends."""
    try:
        return _SCAN(text, pos)
    except Exception:  # a syntax error, NaN, deep nesting: the full decoder says
        raise Refused from None


def scan_string(text: str, pos: int) -> tuple[str, int]:
    """The JSON string at ``pos`` (its opening quote), and where it ends."""
    if not text.startswith('"', pos):
        raise Refused
    try:
        return _STRING(text, pos + 1, True)
    except Exception:
        raise Refused from None


def expect(text: str, pos: int, literal: str) -> int:
    """The position after ``literal``, which must be at ``pos``."""
    if not text.startswith(literal, pos):
        raise Refused
    return pos + len(literal)


def members(
    text: str,
    pos: int,
    cache: MemberCache,
    convert: Convert,
    out: list[Any],
    *,
    array: bool,
    scan: Scan | None = None,
) -> int:
    """Append the converted members of the object (or array) at ``pos`` to ``out``, in file
    order; returns the position after it. Compact JSON only (kubelet writes no whitespace):
    anything else raises :class:`Refused`. ``scan`` finds and converts a member no earlier
    file had (default: the JSON scanner at ``pos``)."""
    if scan is None:
        scan = _scan
    close, head_end = ("]", '",') if array else ("}", '":')
    pos = expect(text, pos, "[" if array else "{")
    order = cache.order
    n = len(order)
    if text.startswith(close, pos):
        cache.changed = cache.changed or n > 0
        cache.span = (text, pos, pos)
        return pos + 1
    first = pos
    i = hits = misses = 0
    changed = False
    keep = cache.new.append
    append = out.append
    piece = cache.pieces.append
    try:
        while True:
            # Most members are the last file's, in its order: take the longest run of them
            # from the one after the last found, else the one the head names, else scan.
            j = cache.run(text, pos, i) if i < n else i
            if j > i:
                run = order[i:j]
                piece(range(i, j))
                cache.new += run
                out += map(_VALUE, run)
                pos += (cache.ends[j - 1] - 1) - (cache.ends[i - 1] if i else 0)
                hits += j - i
                i = j
            else:
                cut = text.find(head_end, pos)
                head = text[pos:cut] if cut > pos else ""
                # The member expected next, else the one the head names.
                at = i if i < n and order[i][0] == head else cache.find(head)
                known = order[at] if 0 <= at < n else None
                changed = True
                if known is not None and text.startswith(known[1], pos):
                    piece(range(at, at + 1))
                    i = at + 1
                    hits += 1
                else:
                    misses += 1
                    known = scan(text, pos, head, convert, array)
                    piece(known)
                    if i < n and order[i][0] == head:
                        i += 1  # the same key in the same place: the run goes on after it
                keep(known)
                append(known[2])
                pos += len(known[1])
            if text.startswith(",", pos):
                pos += 1
            elif text.startswith(close, pos):
                cache.changed = cache.changed or changed or i != n
                cache.span = (text, first, pos)
                return pos + 1
            else:
                raise Refused
    finally:
        cache.hits += hits
        cache.misses += misses


def _scan(text: str, pos: int, head: str, convert: Convert, array: bool) -> Member:
    """A member no earlier file had: scanned, and converted."""
    start = pos
    key: str | None = None
    if array:
        value, pos = scan_value(text, pos)
    else:
        key, pos = scan_string(text, pos)
        value, pos = scan_value(text, expect(text, pos, ":"))
    try:
        return head, text[start:pos], convert(key, value)
    except Refused:
        raise
    except Exception:  # a value kubelet or the store refuses: the full path says how
        raise Refused from None


def go_value(t: GoType, initial: Any, value: Any) -> Any:
    """``value`` (parsed) decoded into ``initial`` of Go type ``t``; refused on an error."""
    try:
        return decode_value(t, initial, value)
    except DecodeError:
        raise Refused from None


def go_string(value: Any) -> str:
    """A parsed value decoded into a Go string field holding ``""``."""
    out: str = go_value(STRING, "", value)
    return out
