"""Members of a JSON document that a file holds as a JSON *string* (DRA's ``Data``), found in
the escaped text itself.

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

from podstore.storage.node.members import _SCAN, _STRING, Convert, Member, Refused

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
