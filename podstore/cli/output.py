"""``-o table|json|yaml|csv`` for every command that lists things, and :func:`emit`, which writes
rows in that format as they come: in batches, a table a window at a time (widths from the first
window, growing after it), so a listing's memory does not grow with its rows.

Table cells escape control characters (``\\n``, ``\\x1b``, ``\\u202e`` …) so that a value cannot
break a line, fake a row or recolour the terminal. JSON is ``json.dumps(rows, indent=2)``'s
text, but strict: a non-finite float (SQL can make one) is ``"NaN"``, ``"Infinity"`` ….
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, TextIO, TypeVar

import click

from podstore.cli import yaml_text

FORMATS = ("table", "json", "yaml", "csv")

#: A table is sized and written this many rows at a time (or fewer, if they are wide).
TABLE_WINDOW_ROWS = 1000
TABLE_WINDOW_CHARS = 1 << 20
#: A column is padded to at most this width: a longer cell overflows its own line only,
#: rather than pushing every other row of the column out with spaces.
TABLE_MAX_PAD = 100
#: JSON, YAML and CSV rows are written in batches of this many.
BATCH_ROWS = 256

F = TypeVar("F", bound=Callable[..., Any])

Row = Mapping[str, Any]


def output_option(fn: F) -> F:
    """Add ``-o/--output`` to a command; the command receives ``output: str``."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(fn)


def emit(
    rows: Iterable[Row], columns: Sequence[str], fmt: str, *, out: TextIO | None = None
) -> int:
    """Write ``rows`` (mappings keyed by ``columns``) to ``out`` (default: stdout) in ``fmt``,
    as they come; returns how many. An exception from ``rows`` propagates after the rows
    before it were written (a table: up to the last full window)."""
    stream = out if out is not None else sys.stdout
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise ValueError(f"unknown output format {fmt!r}")
    count = writer(iter(rows), list(columns), stream)
    stream.flush()
    return count


def render(rows: Iterable[Row], columns: Sequence[str], fmt: str) -> str:
    """Rows in ``fmt`` as one string without the final newline (small outputs, tests)."""
    buf = io.StringIO()
    emit(rows, columns, fmt, out=buf)
    return buf.getvalue().rstrip("\n")


# ---- values ------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    """A value as table and CSV cells show it: lists joined by commas, None blank."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if type(value) is list and all(type(v) is str for v in value):
        return ",".join(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join("" if v is None else str(v) for v in value)
    return str(value)


# Characters that move the cursor, end a line, switch modes or reorder the text around them.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``, …)."""
    if text.isprintable():  # the common case, in C
        return text
    return _CONTROL.sub(_escape_char, text)


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: wide East Asian characters count 2, combining marks 0."""
    if text.isascii():
        return len(text)
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


# ---- writers -----------------------------------------------------------------------------------


def _table(rows: Iterator[Row], columns: list[str], out: TextIO) -> int:
    header = [c.upper() for c in columns]
    widths = [display_width(h) for h in header]
    count = 0
    started = False
    window: list[list[str]] = []
    size = 0

    def flush() -> None:
        nonlocal started, size
        cells = [[len(c) if c.isascii() else display_width(c) for c in line] for line in window]
        for line_widths in cells:
            for i, w in enumerate(line_widths):
                if w > widths[i]:
                    widths[i] = w
        lines = [] if started else [_line(header, [len(h) for h in header], widths)]
        started = True
        lines.extend(_line(line, w, widths) for line, w in zip(window, cells, strict=True))
        out.write("\n".join(lines) + "\n")
        window.clear()
        size = 0

    for row in rows:
        line = [t if t.isprintable() else escape_controls(t) for t in _cells(row, columns)]
        window.append(line)
        size += sum(len(c) for c in line)
        count += 1
        if len(window) >= TABLE_WINDOW_ROWS or size >= TABLE_WINDOW_CHARS:
            flush()
    if window:
        flush()
    if not count:
        out.write("(none)\n")
    return count


def _cells(row: Row, columns: list[str]) -> list[str]:
    return [v if type(v) is str else cell(v) for v in [row.get(c) for c in columns]]


def _line(cells: list[str], cell_widths: list[int], widths: list[int]) -> str:
    last = len(cells) - 1
    parts = [
        c if i == last else c + " " * (min(widths[i], TABLE_MAX_PAD) - cell_widths[i])
        for i, c in enumerate(cells)
    ]
    return "  ".join(parts).rstrip(" ")


def _batches(rows: Iterator[Row]) -> Iterator[list[Row]]:
    while batch := list(islice(rows, BATCH_ROWS)):
        yield batch


#: The library's encoder, made once (json.dumps with options builds one per call).
_JSON = json.JSONEncoder(indent=2, allow_nan=False)


def _json(rows: Iterator[Row], columns: list[str], out: TextIO) -> int:
    count = 0
    out.write("[")
    for batch in _batches(rows):
        # A batch's text between its brackets, comma-joined, is what json.dumps(all rows)
        # writes between its own (per row would set up the indenting encoder once a row).
        text = _JSON.encode([{c: plain(row.get(c), strict=True) for c in columns} for row in batch])
        out.write(("," if count else "") + text[1:-2])
        count += len(batch)
    out.write("\n]\n" if count else "]\n")
    return count


def plain(value: Any, *, strict: bool = False) -> Any:
    """``value`` as JSON and YAML hold it: sequences and sets (sorted) as lists, keys as
    strings, other objects as their text; ``strict`` (JSON): a non-finite float as ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"``."""
    kind = type(value)
    if kind is str or kind is int or value is None or kind is bool:
        return value
    if kind is list and all(type(v) is str for v in value):  # device lists: the common case
        return value
    if isinstance(value, float):
        if not strict or math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v, strict=strict) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [plain(v, strict=strict) for v in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        return [plain(v, strict=strict) for v in value]
    return str(value)


def _yaml(rows: Iterator[Row], columns: list[str], out: TextIO) -> int:
    count = 0
    for batch in _batches(rows):
        items = [{c: plain(row.get(c)) for c in columns} for row in batch]
        # A block sequence written in pieces is the same text as written whole.
        out.write(yaml_text.sequence_items(items))
        count += len(items)
    if not count:
        out.write("[]\n")
    return count


def _csv(rows: Iterator[Row], columns: list[str], out: TextIO) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    count = 0
    for batch in _batches(rows):
        writer.writerows(_cells(row, columns) for row in batch)
        count += len(batch)
    return count


_WRITERS: dict[str, Callable[[Iterator[Row], list[str], TextIO], int]] = {
    "table": _table,
    "json": _json,
    "yaml": _yaml,
    "csv": _csv,
}


def emit_object(info: Mapping[str, Any], fmt: str, *, out: TextIO | None = None) -> None:
    """Write one record (``podstore status``): aligned ``key  value`` lines for a table, else
    one JSON object, YAML mapping, or CSV header and row."""
    stream = out if out is not None else sys.stdout
    if fmt == "table":
        width = max((len(k) for k in info), default=0)
        stream.write(
            "".join(
                f"{k.replace('_', ' '):<{width}}  {escape_controls(cell(v))}\n"
                for k, v in info.items()
            )
        )
    elif fmt == "json":
        stream.write(_JSON.encode(plain(info, strict=True)) + "\n")
    elif fmt == "yaml":
        stream.write(yaml_text.mapping({k: plain(v) for k, v in info.items()}))
    else:
        emit([info], list(info), fmt, out=stream)
        return
    stream.flush()
