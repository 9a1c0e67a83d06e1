"""Kubelet releases and what each reads and writes, parsed from the release table in the docs
(docs/kubelet-release-table.md, shipped inside the package) on first use, so that importing
podstore does not pay for it."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from podstore.errors import InvalidInputError

FIRST_MINOR = 18
NEWEST_MINOR = 37
GATE = "PodLevelResourceManagers"
KINDS = ("devices", "cpu", "memory", "dra")
_TABLE = Path(__file__).with_name("kubelet-release-table.md")


@dataclass(frozen=True)
class Release:
    """A kubelet minor release (``1.N``); ``minor`` None means any release (every format)."""

    minor: int | None

    def __str__(self) -> str:
        return "any" if self.minor is None else f"1.{self.minor}"


KNOWN: tuple[Release, ...] = tuple(Release(n) for n in range(FIRST_MINOR, NEWEST_MINOR + 1))
NEWEST = KNOWN[-1]
_RANGE = f"1.{FIRST_MINOR}..1.{NEWEST_MINOR}, newest or any"


def parse_release(text: str) -> Release:
    """``1.N`` for a known minor, ``newest`` or ``any``; else InvalidInputError."""
    t = text.strip()
    if t == "newest":
        return NEWEST
    if t == "any":
        return Release(None)
    m = re.fullmatch(r"v?1\.(\d+)", t)
    if m and FIRST_MINOR <= int(m.group(1)) <= NEWEST_MINOR:
        return Release(int(m.group(1)))
    raise InvalidInputError(f"unknown kubelet version {text!r} (known: {_RANGE})")


def parse_gates(text: str) -> dict[str, bool]:
    """kubelet's ``--feature-gates`` spelling ``Name=true,Other=false``."""
    gates: dict[str, bool] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
            raise InvalidInputError(f"malformed feature gate {part!r} (expected Name=true|false)")
        if value not in ("true", "false"):
            raise InvalidInputError(f"feature gate {name} must be true or false, not {value!r}")
        gates[name] = value == "true"
    return gates


@dataclass(frozen=True)
class Span:
    """Releases ``first``..``last``, optionally only with the gate on (True) or off (False)."""

    first: int
    last: int
    gate: bool | None = None

    def holds(self, minor: int, gate_on: bool) -> bool:
        return self.first <= minor <= self.last and (self.gate is None or self.gate == gate_on)


@dataclass(frozen=True)
class Row:
    """One table row: a file ``file`` of ``kind`` is accepted by ``accepted_by``, read as
    ``read_as``, losing ``drops``; ``written_by`` write that format."""

    kind: str
    file: str
    read_as: str | None
    accepted_by: tuple[Span, ...]
    drops: tuple[str, ...]
    written_by: tuple[Span, ...]
    evidence: str


def _spans(cell: str) -> tuple[Span, ...]:
    if cell in ("—", "-", ""):
        return ()
    out = []
    for token in cell.split(","):
        m = re.fullmatch(r"\s*1\.(\d+)(?:-1\.(\d+))?(?:\s*\(gate (on|off)\))?\s*", token)
        if m is None:
            raise ValueError(f"release table: bad release range {token!r}")
        first = int(m.group(1))
        last = int(m.group(2) or first)
        gate = None if m.group(3) is None else m.group(3) == "on"
        out.append(Span(first, last, gate))
    return tuple(out)


def parse_table(text: str) -> tuple[Row, ...]:
    """The rows between the table markers."""
    body = text.split("<!-- release-table:begin -->", 1)[1]
    body = body.split("<!-- release-table:end -->", 1)[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7:
            raise ValueError(f"release table: expected 7 cells in {line!r}")
        kind, file, read_as, accepted, drops, written, evidence = cells
        rows.append(
            Row(
                kind,
                file,
                None if read_as == "—" else read_as,
                _spans(accepted),
                () if drops == "—" else tuple(d.strip() for d in drops.split(";")),
                _spans(written),
                evidence,
            )
        )
    return tuple(rows)


@functools.cache
def table() -> tuple[Row, ...]:
    """The release table, parsed once."""
    return parse_table(_TABLE.read_text(encoding="utf-8"))


def gate_on(gates: Mapping[str, bool]) -> bool:
    return bool(gates.get(GATE, False))


def has_manager(kind: str, release: Release) -> bool:
    """Whether ``release`` has a manager (and so a file) for ``kind``."""
    if release.minor is None:
        return True
    return not any(
        r.kind == kind
        and r.file == "none"
        and any(s.holds(release.minor, True) for s in r.accepted_by)
        for r in table()
    )


def written_format(kind: str, release: Release, gates: Mapping[str, bool]) -> str:
    """The format ``release`` writes for ``kind`` (for ``any``: the newest release's)."""
    if kind not in KINDS:
        raise InvalidInputError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    minor = NEWEST_MINOR if release.minor is None else release.minor
    on = gate_on(gates)
    for row in table():
        if row.kind == kind and any(s.holds(minor, on) for s in row.written_by):
            return row.file
    raise InvalidInputError(f"kubelet {release} writes no {kind} checkpoint")
