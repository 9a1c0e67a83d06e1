"""Members of a JSON document that a file holds as a JSON *string* (DRA's ``Data``, the
``data`` of CPU v4), matched in the escaped text, so that the whole string is never unescaped.

DRA's claims are found in the escaped text itself (:func:`scan_element`). The CPU file also
holds the document unescaped (its older copy), where its members are read; the string is then
checked to hold that text escaped (:func:`check_escaped`), run by run of the last file's
members: each table keeps its body escaped (``MemberCache.ebody``), so a run is one
comparison, and only a member no earlier file had is escaped anew.

Unescaping the whole string costs as much as parsing the file, and most of it is the last
file's members. So the members are matched (:func:`.members.members`) by their *escaped*
text, and only what no earlier file had is unescaped: a piece of the string between two of
its literal characters (``,``, ``[``, ``]``, ``}`` are never part of an escape) unescapes on
its own to exactly the text it stands for in the whole, so the data is the concatenation of
its pieces' unescaped texts. Each piece is unescaped by the scanner the full decoder runs on
the whole string (strict: a control character or a bad escape is refused), and must end
where it was cut (a bare quote ends the string early, an odd backslash escapes the closing
quote): else :class:`.members.Refused`, and the full path reads the file.
"""

from __future__ import annotations

from itertools import repeat
from operator import add

from podstore.storage.node.members import (
    _SCAN,
    _STRING,
    Convert,
    Member,
    MemberCache,
    Refused,
)

#: Past this many of an element's candidate ends (``}`` before ``,`` or ``]``), the fast
#: path gives up: each try scans the element so far again.
MAX_TRIES = 64


def unescape(text: str, start: int, end: int) -> str:
    """What ``text[start:end]``, a piece of a JSON string's content, stands for."""
    piece = '"' + text[start:end] + '"'
    try:
        out, stop = _STRING(piece, 1, True)
    except Exception:  # a bad escape, a control character: the full decoder says which
        raise Refused from None
    if stop != len(piece):
        raise Refused  # a bare quote inside: the string ends there, not where it was cut
    return out


def scan_element(text: str, pos: int, head: str, convert: Convert, array: bool) -> Member:
    """The array element (an object) at ``pos`` of the escaped text, converted: it ends at the
    first ``}`` before ``,`` or ``]`` where the text from ``pos`` unescapes to one whole JSON
    value. ``convert`` gets (None, (value, its unescaped text))."""
    if not array or not text.startswith("{", pos):
        raise Refused
    find = text.find
    done = pos
    unescaped = ""
    cut = find("}", pos)
    tries = 0
    while cut >= 0:
        if text.startswith((",", "]"), cut + 1):
            unescaped += unescape(text, done, cut + 1)
            done = cut + 1
            try:
                value, end = _SCAN(unescaped, 0)
            except Exception:  # not whole yet (or never: then no cut makes it whole)
                end = -1
            if end == len(unescaped):
                try:
                    return head, text[pos:done], convert(None, (value, unescaped))
                except Refused:
                    raise
                except Exception:  # a value kubelet or the store refuses
                    raise Refused from None
            tries += 1
            if tries >= MAX_TRIES:
                raise Refused
        cut = find("}", cut + 1)
    raise Refused


def escape(text: str) -> str:
    """``text`` as a JSON string holds it when it has no control character: ``"`` and ``\\``
    each after a backslash (what kubelet's encoder writes for ASCII text without ``<>&``)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def check_escaped(text: str, pos: int, end: int, tables: list[MemberCache]) -> int:
    """Check that ``text`` at ``pos`` holds ``text[:end] + "}"`` escaped (:func:`escape`:
    the caller has checked that it has no control character), where ``tables`` are the
    tables whose members this read found in ``text[:end]``, in order (``span``, ``pieces``);
    returns where the escaped text ends. Sets each table's ``escaped``."""
    at = 0
    for cache in tables:
        _, first, last = cache.span
        pos = _literal(text, pos, text[at:first])
        pos = _body(text, pos, cache)
        at = last
    return _literal(text, pos, text[at:end] + "}")


def _literal(text: str, pos: int, piece: str) -> int:
    escaped = escape(piece)
    if not text.startswith(escaped, pos):
        raise Refused
    return pos + len(escaped)


def _body(text: str, pos: int, cache: MemberCache) -> int:
    start = pos
    ebody, eends, order = cache.ebody, cache.eends, cache.order
    ends: list[int] = []
    members: list[Member] = []
    for k, piece in enumerate(cache.pieces):
        if k:
            pos = _literal(text, pos, ",")
        if not isinstance(piece, range):
            members = [piece]
        elif ebody is None:  # not known: each member of the run escaped anew
            members = order[piece.start : piece.stop]
        else:
            s0 = eends[piece.start - 1] if piece.start else 0
            run = ebody[s0 : eends[piece.stop - 1] - 1]
            if not text.startswith(run, pos):
                raise Refused
            ends += map(add, eends[piece.start : piece.stop], repeat(pos - start - s0))
            pos += len(run)
            continue
        for i, member in enumerate(members):
            if i:
                pos = _literal(text, pos, ",")
            pos = _literal(text, pos, member[1])
            ends.append(pos - start + 1)
    cache.escaped = (text[start:pos], ends)
    return pos
