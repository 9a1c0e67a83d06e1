"""Linux CPU lists as kubelet's cpuset.Parse reads them and CPUSet.String writes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podstore.checkpoint import CPUSetError, format_cpuset, parse_cpuset
from podstore.checkpoint.cpuset import MAX_CPU_ID
from podstore.errors import InvalidInputError


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", set()),
        ("0", {0}),
        ("0,2-12,14-23", {0, *range(2, 13), *range(14, 24)}),
        ("5,1-3", {1, 2, 3, 5}),  # any order
        ("1-1", {1}),  # a range of one
        ("2,2,1-2", {1, 2}),  # repeats
        ("+3", {3}),  # strconv.Atoi takes a sign ...
        ("007", {7}),  # ... and leading zeros
        ("+1-+3", {1, 2, 3}),
        (f"0-{MAX_CPU_ID}", set(range(MAX_CPU_ID + 1))),
    ],
)
def test_what_kubelet_parses(text: str, cpus: set[int]) -> None:
    assert parse_cpuset(text) == frozenset(cpus)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1.3", 'parsing "1.3": invalid syntax'),  # upstream vector's bad default set
        ("asd", 'parsing "asd": invalid syntax'),
        ("1,", 'parsing "": invalid syntax'),
        (",1", 'parsing "": invalid syntax'),
        ("1,,2", 'parsing "": invalid syntax'),
        ("-1", 'parsing "": invalid syntax'),  # the '-' splits it
        ("1-", 'parsing "": invalid syntax'),
        (" 1", 'parsing " 1": invalid syntax'),
        ("1 ", 'parsing "1 ": invalid syntax'),
        ("１", "invalid syntax"),  # a full-width digit
        ("3-1", 'invalid range "3-1" (3 > 1)'),
        ("3--5", 'invalid range "3--5" (3 > -5)'),
        ("1-2-3", 'parsing "2-3": invalid syntax'),
        ("99999999999999999999", "value out of range"),
        (f"{MAX_CPU_ID + 1}", f"above the limit {MAX_CPU_ID}"),
        ("0-999999999", f"above the limit {MAX_CPU_ID}"),
        (",".join(["0-65535"] * 5), "CPUs in all"),
    ],
)
def test_what_is_refused_and_why(text: str, reason: str) -> None:
    with pytest.raises(CPUSetError) as info:
        parse_cpuset(text)
    assert reason in str(info.value)
    assert isinstance(info.value, InvalidInputError)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        (set(), ""),
        ({0}, "0"),
        ({1, 2}, "1-2"),
        ({0, 1, 2, 3, 5}, "0-3,5"),
        ({5, 3, 1}, "1,3,5"),
        ({0, *range(2, 96), *range(97, 192)}, "0,2-95,97-191"),  # a real file's default set
    ],
)
def test_canonical_form(cpus: set[int], text: str) -> None:
    assert format_cpuset(cpus) == text


@given(st.frozensets(st.integers(0, 300), max_size=80))
def test_format_then_parse_is_identity(cpus: frozenset[int]) -> None:
    text = format_cpuset(cpus)
    assert parse_cpuset(text) == cpus
    assert format_cpuset(parse_cpuset(text)) == text
