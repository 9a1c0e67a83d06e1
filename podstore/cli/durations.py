"""Durations on the command line (``prune --keep 30d``, ``watch --keep-history 12h``): a number
and a unit — ``s``, ``m``, ``h``, ``d``, ``w`` — or several in a row (``1h30m``); a plain
number is seconds."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import click

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+|\d+(?:\.\d+)?")

#: The largest duration accepted (about 100 years): past it, times overflow.
MAX_SECONDS = 100 * 366 * 86400.0


def parse_duration(text: str) -> float:
    """``text`` in seconds; raises ValueError naming what is wrong."""
    value = text.strip().lower()
    if not _WHOLE.fullmatch(value):
        raise ValueError(f"{text!r} is not a duration (e.g. 30d, 12h, 90m, 1h30m, 45s)")
    if value[-1].isdigit():
        seconds = float(value)
    else:
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value))
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"{text!r} is too long (at most 100 years)")
    return seconds


def describe(seconds: float) -> str:
    """A duration as the largest units that write it exactly (``2592000`` → ``30d``)."""
    if seconds <= 0:
        return "0s"
    out = []
    rest = seconds
    for unit, size in sorted(_UNITS.items(), key=lambda kv: -kv[1]):
        if unit == "w":
            continue  # 30d reads better than 4w2d
        count = int(rest // size)
        if count:
            out.append(f"{count}{unit}")
            rest -= count * size
    if rest > 1e-9:
        out.append(f"{rest:g}s" if not out else f"{round(rest, 3):g}s")
    return "".join(out)


def duration(
    minimum: float = 0.0,
) -> Callable[[click.Context, click.Parameter, Any], float | None]:
    """An option callback: the option's text (or default) in seconds, None when not given;
    a bad one, or one below ``minimum``, is a usage error (exit 2)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> float | None:
        if value is None:
            return None
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        if seconds < minimum:
            raise click.BadParameter(f"{value!r} is shorter than {describe(minimum)}")
        return seconds

    return callback
