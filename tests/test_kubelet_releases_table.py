"""The release table in the docs: parsed, complete for 1.18..newest, one citation per row."""

from __future__ import annotations

import pytest

from podstore.checkpoint.releases import (
    KINDS,
    KNOWN,
    NEWEST,
    Release,
    parse_gates,
    parse_release,
    table,
    written_format,
)
from podstore.errors import InvalidInputError


def test_every_release_writes_or_has_no_manager_for_every_kind() -> None:
    rows = table()
    for kind in KINDS:
        for rel in KNOWN:
            assert rel.minor is not None
            for on in (False, True):
                hit = [
                    r
                    for r in rows
                    if r.kind == kind
                    and any(s.holds(rel.minor, on) for s in (r.written_by or r.accepted_by))
                    and (r.written_by or r.file == "none")
                ]
                assert hit, (kind, str(rel), on)


def test_every_row_has_a_citation() -> None:
    for row in table():
        assert row.evidence and ("#" in row.evidence or "@" in row.evidence or "§" in row.evidence)
        assert "§" in row.evidence


def test_parse_release() -> None:
    assert str(parse_release("1.18")) == "1.18"
    assert parse_release("newest") == NEWEST == Release(37)
    assert str(parse_release("any")) == "any"
    for bad in ("1.17", "1.38", "2.0", "x", ""):
        with pytest.raises(InvalidInputError, match=r"1\.18\.\.1\.37"):
            parse_release(bad)


def test_parse_gates() -> None:
    assert parse_gates("PodLevelResourceManagers=true,Other=false") == {
        "PodLevelResourceManagers": True,
        "Other": False,
    }
    for bad in ("Foo", "Foo=yes", "=true"):
        with pytest.raises(InvalidInputError):
            parse_gates(bad)


@pytest.mark.parametrize(
    ("kind", "minor", "on", "fmt"),
    [
        ("devices", 19, False, "v1"),  # D1 until 1.19 (commit a8b8995e, #102880)
        ("devices", 20, False, "v2"),
        ("cpu", 35, True, "v2"),  # no gate before 1.36
        ("cpu", 36, False, "v2"),
        ("cpu", 36, True, "v3"),  # PR #134768
        ("cpu", 37, False, "v4"),  # PR #139102
        ("memory", 36, True, "v2"),
        ("memory", 37, False, "v3"),  # PR #139626
        ("dra", 31, False, "v1"),  # issue #127653
        ("dra", 32, False, "data"),  # PR #126303
    ],
)
def test_written_format(kind: str, minor: int, on: bool, fmt: str) -> None:
    gates = {"PodLevelResourceManagers": on}
    assert written_format(kind, Release(minor), gates) == fmt


def test_no_manager_writes_nothing() -> None:
    with pytest.raises(InvalidInputError):
        written_format("memory", Release(20), {})
    assert written_format("dra", Release(None), {}) == "data"
