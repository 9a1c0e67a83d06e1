"""Go ``encoding/json`` where Python's :mod:`json` does not agree (kubelet's ``json.Unmarshal``
and ``json.Marshal``).

Objects parse as tuples of pairs (duplicate keys and their order matter to Go), numbers as
their literal text. Strings arrive decoded with ``errors="surrogateescape"``: every lone
surrogate stands for one invalid UTF-8 byte.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Callable
from typing import Any, NoReturn

#: Go's scanner refuses to nest arrays and objects deeper than this (``maxNestingDepth``).
MAX_DEPTH = 10000


class Int(str):
    """The literal text of a JSON number without fraction or exponent, e.g. ``"-12"``."""

    __slots__ = ()


class Float(str):
    """The literal text of a JSON number with a fraction or an exponent, e.g. ``"1.0"``."""

    __slots__ = ()


class JSONSyntaxError(ValueError):
    """Text that Go's JSON scanner rejects; ``offset`` is the byte offset of the fault."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"invalid JSON at byte offset {offset}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickles by its own arguments (worker processes)
        return (type(self), (self.offset, self.reason), self.__dict__)


class _ConstantSeen(Exception):
    """Python's scanner met NaN or Infinity, which Go rejects; the slow parser finds where."""


def _reject_constant(name: str) -> NoReturn:
    raise _ConstantSeen(name)


_DECODER = json.JSONDecoder(
    object_pairs_hook=tuple,
    parse_int=Int,
    parse_float=Float,
    parse_constant=_reject_constant,
    strict=True,
)


def parse(text: str) -> Any:
    """A whole JSON document parsed by Go's rules (``NaN``, nesting past 10000, trailing text,
    a BOM refused): ``list`` for arrays, ``tuple`` of pairs for objects, :class:`Int` /
    :class:`Float` for numbers, strings as written (see :func:`fix_string`).

    Raises :class:`JSONSyntaxError` naming the byte offset of the first fault.
    """
    if text.startswith("\ufeff"):
        raise JSONSyntaxError(0, "a UTF-8 byte order mark is not allowed (Go rejects it)")
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        reason = "unexpected end of JSON input" if e.pos >= len(text) else e.msg
        raise JSONSyntaxError(_byte_offset(text, e.pos), reason) from None
    except (_ConstantSeen, RecursionError):
        # Both are rare: NaN/Infinity (an error whose offset Python's C scanner does not
        # report) and nesting deeper than Python's recursion limit but possibly within Go's.
        return _parse_iteratively(text)


def _byte_offset(text: str, pos: int) -> int:
    try:
        return len(text[:pos].encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text[:pos].encode("utf-8", "surrogatepass"))


_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    assert m is not None  # the pattern also matches the empty string
    return m.end()


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# The C string scanner json.decoder uses; typeshed does not declare it.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _Frame:
    __slots__ = ("is_object", "items", "key")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.items: list[Any] = []
        self.key = ""


def _parse_iteratively(text: str) -> Any:
    """The same grammar as :func:`parse`, with an explicit stack instead of recursion."""
    n = len(text)

    def fail(pos: int, reason: str) -> NoReturn:
        if pos >= n:
            reason = "unexpected end of JSON input"
        raise JSONSyntaxError(_byte_offset(text, pos), reason)

    def read_key(pos: int, frame: _Frame) -> int:
        if pos >= n or text[pos] != '"':
            fail(pos, "expecting a string key")
        try:
            frame.key, pos = _scanstring(text, pos + 1, True)
        except json.JSONDecodeError as e:
            fail(e.pos, e.msg)
        pos = _skip_ws(text, pos)
        if pos >= n or text[pos] != ":":
            fail(pos, "expecting ':' after an object key")
        return _skip_ws(text, pos + 1)

    stack: list[_Frame] = []
    pos = _skip_ws(text, 0)
    while True:
        # Read one value starting at pos.
        c = text[pos] if pos < n else ""
        value: Any
        if c in "{[":
            if len(stack) >= MAX_DEPTH:
                fail(pos, "exceeded max depth")
            close = "}" if c == "{" else "]"
            after = _skip_ws(text, pos + 1)
            if after < n and text[after] == close:
                value = () if c == "{" else []
                pos = after + 1
            else:
                frame = _Frame(c == "{")
                stack.append(frame)
                pos = read_key(after, frame) if frame.is_object else after
                continue
        elif c == '"':
            try:
                value, pos = _scanstring(text, pos + 1, True)
            except json.JSONDecodeError as e:
                fail(e.pos, e.msg)
        elif text.startswith("null", pos):
            value, pos = None, pos + 4
        elif text.startswith("true", pos):
            value, pos = True, pos + 4
        elif text.startswith("false", pos):
            value, pos = False, pos + 5
        else:
            m = _NUMBER.match(text, pos)
            if m is None:
                fail(pos, "expecting a value")
            literal = m.group()
            value = Float(literal) if m.group(1) or m.group(2) else Int(literal)
            pos = m.end()
        # Hand the value to its container; close every container that ends here.
        while True:
            pos = _skip_ws(text, pos)
            if not stack:
                if pos != n:
                    fail(pos, "extra data after the top-level value")
                return value
            frame = stack[-1]
            frame.items.append((frame.key, value) if frame.is_object else value)
            c = text[pos] if pos < n else ""
            if c == ",":
                pos = _skip_ws(text, pos + 1)
                if frame.is_object:
                    pos = read_key(pos, frame)
                break
            if c == ("}" if frame.is_object else "]"):
                stack.pop()
                value = tuple(frame.items) if frame.is_object else frame.items
                pos += 1
                continue
            fail(pos, "expecting ',' or " + ("'}'" if frame.is_object else "']'"))


# -- scalars, as Go's decoder converts them -------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def fix_string(s: str) -> str:
    """Each lone surrogate (an invalid byte, an unpaired ``\\uD800``) replaced by U+FFFD, as Go."""
    if s.isascii() or _SURROGATE.search(s) is None:
        return s
    return _SURROGATE.sub("\ufffd", s)


# Unicode's simple case folding links exactly two non-ASCII runes with ASCII letters:
# U+017F LATIN SMALL LETTER LONG S (with s/S) and U+212A KELVIN SIGN (with k/K).
_FOLD_TO_ASCII = {0x017F: "S", 0x212A: "K"}


def fold_name(key: str) -> str | None:
    """The key as Go's simple case folding matches it to an ASCII field name (``None``: it
    cannot match any)."""
    if not key.isascii():
        key = key.translate(_FOLD_TO_ASCII)
        if not key.isascii():
            return None
    return key.upper()


_DIGITS = re.compile(r"[0-9]+")


def parse_int(text: str, bits: int = 64) -> int | None:
    """``strconv.ParseInt(text, 10, bits)`` (``"+2"``, ``"02"``, ``"-0"`` accepted); ``None`` if
    invalid."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not _DIGITS.fullmatch(body):
        return None
    body = body.lstrip("0") or "0"
    if len(body) > 20:
        return None
    value = -int(body) if text[:1] == "-" else int(body)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def parse_uint(text: str, bits: int = 64) -> int | None:
    """``strconv.ParseUint(text, 10, bits)``; ``None`` if invalid (a sign, even ``-0``, too)."""
    return None if text[:1] in ("+", "-") else parse_int(text, bits + 1)


def decode_base64(s: str) -> bytes | None:
    """``base64.StdEncoding.DecodeString`` (skips CR and LF, accepts non-zero trailing bits);
    ``None`` if bad."""
    if "\r" in s or "\n" in s:
        s = s.replace("\r", "").replace("\n", "")
    # Python's strict mode allows two layouts Go refuses: a partial final quantum followed by
    # more '=', and a quantum made only of padding; length and position checks close both.
    if len(s) % 4 or s.find("=", 0, len(s) - 2) >= 0:
        return None
    try:
        return binascii.a2b_base64(s, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def kind(value: object) -> str:
    """How Go's errors name a JSON value: object, array, string, number, bool or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Int | Float):
        return f"number {value}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# -- encoding -------------------------------------------------------------------------------

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False, allow_nan=False
)
# Python's encoder already escapes like Go 1.22+ (\" \\ \b \f \n \r \t, other C0 controls as
# lowercase \u00XX, DEL raw); Go additionally escapes these for HTML/JavaScript safety, and
# writes each invalid byte (a lone surrogate here) as \ufffd.
_GO_ONLY = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
_GO_ONLY_TEXT = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _go_escape(m: re.Match[str]) -> str:
    return _GO_ONLY_TEXT.get(m.group(), "\\ufffd")


def encode(value: object) -> bytes:
    """The bytes Go 1.22+ ``json.Marshal`` writes for ``value`` (dicts already in Go's key
    order); earlier Go wrote ``\\u0008`` and ``\\u000c`` for ``\\b`` and ``\\f``."""
    text = _ENCODER.encode(value)
    # The escaped characters can only occur inside strings, so a pass over the whole text is
    # safe; the usual all-ASCII text needs only three substring searches, which are faster.
    if text.isascii():
        needs_pass = "<" in text or ">" in text or "&" in text
    else:
        needs_pass = _GO_ONLY.search(text) is not None
    if needs_pass:
        text = _GO_ONLY.sub(_go_escape, text)
    return text.encode("utf-8")
