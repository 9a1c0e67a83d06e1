"""Linux CPU list strings (``"0,2-12,14-23"``), as kubelet's ``cpuset.Parse`` and
``CPUSet.String`` read and write them (docs/node-files.md), with limits against hostile files:
an id above :data:`MAX_CPU_ID` is refused, so ``"0-999999999"`` cannot make a billion-element set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from podstore.checkpoint.gojson import parse_int
from podstore.errors import InvalidInputError

#: The largest CPU id accepted (Linux caps NR_CPUS at 8192 on x86-64).
MAX_CPU_ID = 65535
# Ranges may overlap; what one string may list in all, repeats included, is bounded too, so
# that many copies of "0-65535" cannot cost billions of steps.
_MAX_LISTED = 4 * (MAX_CPU_ID + 1)


class CPUSetError(InvalidInputError):
    """A CPU list string kubelet would not parse, or one beyond :data:`MAX_CPU_ID`."""


def _q(text: str) -> str:
    # Go's %q, as kubelet's messages quote: double quotes, escapes.
    return json.dumps(text)


def _atoi(text: str, whole: str) -> int:
    if text.isdigit() and text.isascii() and len(text) < 19:
        return int(text)
    n = parse_int(text, 64)
    if n is None:
        body = text[1:] if text[:1] in "+-" else text
        reason = "value out of range" if body.isdigit() and body.isascii() else "invalid syntax"
        raise CPUSetError(f"invalid cpuset {_q(whole)}: strconv.Atoi: parsing {_q(text)}: {reason}")
    return n


def parse_cpuset(text: str) -> frozenset[int]:
    """The CPUs a Linux CPU list names; raises :class:`CPUSetError` naming the fault."""
    if not text:
        return frozenset()
    cpus: set[int] = set()
    budget = _MAX_LISTED
    for item in text.split(","):
        start_text, dash, end_text = item.partition("-")
        start = _atoi(start_text, text)
        end = _atoi(end_text, text) if dash else start
        if start > end:
            raise CPUSetError(
                f"invalid cpuset {_q(text)}: invalid range {_q(item)} ({start} > {end})"
            )
        if end > MAX_CPU_ID:
            raise CPUSetError(
                f"invalid cpuset {_q(text)}: CPU id {end} is above the limit {MAX_CPU_ID}"
            )
        budget -= end - start + 1
        if budget < 0:
            raise CPUSetError(
                f"invalid cpuset {_q(text[:40])}...: lists more than {_MAX_LISTED} CPUs in all"
            )
        if start == end:
            cpus.add(start)
        else:
            cpus.update(range(start, end + 1))
    return frozenset(cpus)


def format_cpuset(cpus: Iterable[int]) -> str:
    """The canonical Linux CPU list of ``cpus`` (``CPUSet.String``): ``"0-3,5"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
