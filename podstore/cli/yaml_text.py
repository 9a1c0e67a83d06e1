"""Block-style YAML for the rows the commands print, written directly: PyYAML's representer
costs about 200 µs a row (seconds for a large store's listing).

The layout is ``safe_dump(sort_keys=False, allow_unicode=True)``'s; which strings would read
back as something else is left to PyYAML's own implicit resolvers, so ``yaml.safe_load`` gives
back exactly the values. A string is plain when that is safe, else single-quoted, else (a
character YAML may not carry raw) double-quoted with escapes.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

Resolvers = dict[str | None, list[tuple[str, re.Pattern[str]]]]


@functools.cache
def _resolvers() -> Resolvers:
    # PyYAML files its resolvers under the first characters they can match (None: any);
    # imported on first use, so that commands printing no YAML do not pay for it.
    import yaml.resolver

    table: Resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers
    return table


_STR_TAG = "tag:yaml.org,2002:str"
# Characters a plain scalar may start with and contain, kept well inside YAML's rules: no
# indicator (-?:,[]{}#&*!|>'"%@`) at the start, no space, no ': ' or ' #' possible.
_PLAIN = re.compile(r"[A-Za-z0-9_./(][A-Za-z0-9_./()+=@:~^$-]*\Z")


def _resolves_to_other(text: str) -> bool:
    """True when PyYAML would read ``text`` unquoted as a number, bool, null, timestamp …"""
    resolvers = _resolvers()
    candidates = resolvers.get(text[0] if text else "", []) + resolvers.get(None, [])
    return any(tag != _STR_TAG and regexp.match(text) for tag, regexp in candidates)


def _yaml_printable(ch: str) -> bool:
    # YAML's printable set, less the characters it reads as line breaks (NEL, LS, PS) and
    # the BOM, which a reader drops.
    code = ord(ch)
    if code in (0x09, 0x0A, 0x0D):
        return False  # printable, but would be folded or taken as a line break
    if 0x20 <= code <= 0x7E:
        return True
    if code in (0x85, 0x2028, 0x2029, 0xFEFF):
        return False
    return 0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\", "\x00": "\\0"}


def _double_quoted(text: str) -> str:
    out = ['"']
    for ch in text:
        named = _ESCAPES.get(ch)
        if named is not None:
            out.append(named)
        elif _yaml_printable(ch):
            out.append(ch)
        else:
            code = ord(ch)
            letter, width = ("x", 2) if code < 0x100 else ("u", 4) if code < 0x10000 else ("U", 8)
            out.append(f"\\{letter}{code:0{width}X}")
    out.append('"')
    return "".join(out)


def string(text: str) -> str:
    """A string as a YAML scalar that reads back as exactly that string."""
    if _PLAIN.match(text) and text[-1] != ":" and not _resolves_to_other(text):
        return text
    printable = text.isprintable() if text.isascii() else all(map(_yaml_printable, text))
    if printable:
        return "'" + text.replace("'", "''") + "'"
    return _double_quoted(text)


_SCALAR_TYPES = (str, int, float, bool, type(None))
# Resource names, container names, column names repeat on every row: remember their text.
_CACHE: dict[str, str] = {}
_CACHE_SIZE = 4096


def scalar(value: Any) -> str:
    """None, a bool, an int, a float or a string (anything else as its str) as YAML."""
    if type(value) is str:
        text = _CACHE.get(value)
        if text is None:
            text = string(value)
            if len(_CACHE) < _CACHE_SIZE:
                _CACHE[value] = text
        return text
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = float.__repr__(value)
        # YAML 1.1 floats need a dot: 1e+20 would read back as a string.
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
        return text
    return string(value if isinstance(value, str) else str(value))


def _mapping_lines(value: Mapping[Any, Any], indent: str, out: list[str]) -> None:
    for key, item in value.items():
        head = indent + scalar(key) + ":"
        if type(item) is str:  # the common case, inline
            text = _CACHE.get(item)
            out.append(head + " " + (text if text is not None else scalar(item)))
        else:
            _value_after(item, head, indent, out)


def _value_after(item: Any, head: str, indent: str, out: list[str]) -> None:
    if type(item) in _SCALAR_TYPES:
        out.append(head + " " + scalar(item))
    elif isinstance(item, Mapping):
        if not item:
            out.append(head + " {}")
            return
        out.append(head)
        _mapping_lines(item, indent + "  ", out)
    elif isinstance(item, (list, tuple)):
        if not item:
            out.append(head + " []")
            return
        out.append(head)
        # Inside a mapping PyYAML writes the sequence at the key's own indent.
        _sequence_lines(item, indent, out)
    else:
        out.append(head + " " + scalar(item))


def _sequence_lines(items: Any, indent: str, out: list[str]) -> None:
    for item in items:
        if isinstance(item, Mapping) and item:
            start = len(out)
            _mapping_lines(item, indent + "  ", out)
            out[start] = indent + "- " + out[start][len(indent) + 2 :]
        elif isinstance(item, (list, tuple)) and item:
            start = len(out)
            _sequence_lines(item, indent + "  ", out)
            out[start] = indent + "- " + out[start][len(indent) + 2 :]
        elif isinstance(item, Mapping):
            out.append(indent + "- {}")
        elif isinstance(item, (list, tuple)):
            out.append(indent + "- []")
        else:
            out.append(indent + "- " + scalar(item))


def sequence_items(items: Sequence[Mapping[str, Any]]) -> str:
    """Mappings as items of a top-level block sequence (``- a: 1`` …), newline-terminated;
    pieces written one after another form one sequence."""
    out: list[str] = []
    for item in items:
        # _sequence_lines, unrolled for the common case: a mapping of scalars and lists.
        lead = "- "
        for key, value in item.items():
            head = lead + scalar(key) + ":"
            lead = "  "
            if type(value) is str:
                text = _CACHE.get(value)
                out.append(head + " " + (text if text is not None else scalar(value)))
            else:
                _value_after(value, head, "  ", out)
        if lead == "- ":
            out.append("- {}")
    return "\n".join(out) + "\n" if out else ""


def mapping(value: Mapping[str, Any]) -> str:
    """A top-level block mapping, newline-terminated (``{}`` when empty)."""
    if not value:
        return "{}\n"
    out: list[str] = []
    _mapping_lines(value, "", out)
    return "\n".join(out) + "\n"
