"""``emit``: every output format, streamed — exact JSON, YAML that reads back as the values,
escaped tables, bounded memory for any number of rows."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from podstore.cli import output
from podstore.cli.output import emit, emit_object, escape_controls, render

FORMATS = ("table", "json", "yaml", "csv")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.sampled_from(["yes", "no", "on", "null", "~", "1e3", "0x1F", "12:30:00", "2026-12-01",
                     "2026-12-01T10:05:00.000000Z", "0000:3b:02.0", "-", "- x", "a: b", "#x",
                     "x:", "'", '"', "", " lead", "trail ", "\u2028", "\ufeff", "\x85", "="]),
)  # fmt: skip
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.lists(st.text(), max_size=3))),
)
COLUMNS = ["a", "b", "c"]
rows = st.lists(st.fixed_dictionaries({c: values for c in COLUMNS}), max_size=6)


@given(rows)
def test_json_is_exactly_json_dumps_with_indent_2(data: list[dict[str, Any]]) -> None:
    in_column_order = [{c: row[c] for c in COLUMNS} for row in data]
    assert render(data, COLUMNS, "json") == json.dumps(in_column_order, indent=2)


@given(rows)
def test_yaml_reads_back_as_the_values(data: list[dict[str, Any]]) -> None:
    text = render(data, COLUMNS, "yaml")
    assert (yaml.safe_load(text) or []) == data


def test_yaml_looks_like_pyyaml() -> None:
    data = [
        {"a": 1, "b": [], "c": {"0": ["x", "y"], "1": None}},
        {"a": "GPU-1", "b": ["q"], "c": {}},
    ]
    assert render(data, COLUMNS, "yaml") + "\n" == yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True
    )


def test_json_is_strict_for_non_finite_floats() -> None:
    text = render([{"a": math.inf, "b": -math.inf, "c": math.nan}], COLUMNS, "json")

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in JSON")

    assert json.loads(text, parse_constant=refuse) == [
        {"a": "Infinity", "b": "-Infinity", "c": "NaN"}
    ]
    assert yaml.safe_load(render([{"a": math.inf}], ["a"], "yaml"))[0]["a"] == math.inf


def test_tables_escape_control_characters() -> None:
    data = [
        {"a": "pod\nfake-row  x  y", "b": "\x1b[31mred\x1b[0m", "c": "tab\there"},
        {"a": "\u202eevil", "b": "cr\r", "c": "fine"},
    ]
    lines = render(data, COLUMNS, "table").splitlines()
    assert len(lines) == 3  # header + one line per row, whatever the values hold
    assert lines[1].startswith("pod\\nfake-row  x  y")
    assert "\\x1b[31mred\\x1b[0m" in lines[1]
    assert "tab\\there" in lines[1]
    assert lines[2].startswith("\\u202eevil")
    assert "cr\\r" in lines[2]
    assert all(ch.isprintable() for line in lines for ch in line)
    assert escape_controls("plain text, ünïcode") == "plain text, ünïcode"


def test_tables_align_wide_characters_and_cap_padding() -> None:
    data = [{"a": "中文", "b": "x", "c": ""}, {"a": "ab", "b": "y" * 500, "c": "z"}]
    lines = render(data, COLUMNS, "table").splitlines()
    # 中文 takes four terminal columns, as many as "ab" and two spaces of padding.
    x, y = lines[1].index("x"), lines[2].index("y")
    assert output.display_width(lines[1][:x]) == output.display_width(lines[2][:y]) == 6
    assert len(lines[1]) < 120  # a 500-character cell does not pad the other rows


def test_csv_and_table_flatten_lists_and_none() -> None:
    data = [{"a": ["x", "y"], "b": None, "c": True}]
    assert list(csv.reader(io.StringIO(render(data, COLUMNS, "csv")))) == [
        COLUMNS,
        ["x,y", "", "True"],
    ]
    assert render(data, COLUMNS, "table").splitlines()[1].split() == ["x,y", "True"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_rows(fmt: str) -> None:
    text = render(iter(()), COLUMNS, fmt)
    assert text == {"table": "(none)", "json": "[]", "yaml": "[]", "csv": "a,b,c"}[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_any_iterable_of_mappings_will_do(fmt: str) -> None:
    data = [{"a": 1, "b": 2, "c": 3}, {"c": 6, "b": 5, "a": 4}]
    as_list = render(data, COLUMNS, fmt)
    assert render((r for r in data), COLUMNS, fmt) == as_list
    assert render(tuple(data), COLUMNS, fmt) == as_list


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_are_written_as_they_come(fmt: str) -> None:
    """The first rows reach the output before the last row is even made."""
    out = io.StringIO()
    seen: list[int] = []

    def produce() -> Iterator[dict[str, Any]]:
        for i in range(3 * output.TABLE_WINDOW_ROWS):
            if i == 2 * output.TABLE_WINDOW_ROWS:
                seen.append(len(out.getvalue()))
            yield {"a": i, "b": f"row {i}", "c": [i]}

    emit(produce(), COLUMNS, fmt, out=out)
    assert seen[0] > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_does_not_grow_with_the_rows(fmt: str) -> None:
    class Sink(io.TextIOBase):
        size = 0

        def write(self, s: str) -> int:
            self.size += len(s)
            return len(s)

    def peak(n: int) -> int:
        tracemalloc.start()
        try:
            sink = Sink()
            emit(({"a": f"pod-{i:08d}", "b": [f"GPU-{i}"], "c": {"0": [str(i)]}}
                  for i in range(n)), COLUMNS, fmt, out=sink)  # fmt: skip
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1_500), peak(12_000)
    assert large < small * 1.5 + 256 * 1024, (small, large)
    assert large < 4 << 20


def test_emit_object_formats() -> None:
    info = {"database": "x.db", "pods": 2, "ratio": math.inf}
    out = io.StringIO()
    emit_object(info, "json", out=out)
    assert json.loads(out.getvalue()) == {"database": "x.db", "pods": 2, "ratio": "Infinity"}
    out = io.StringIO()
    emit_object(info, "yaml", out=out)
    assert yaml.safe_load(out.getvalue()) == info
    out = io.StringIO()
    emit_object(info, "table", out=out)
    assert out.getvalue().splitlines()[1].split() == ["pods", "2"]
    out = io.StringIO()
    emit_object(info, "csv", out=out)
    assert out.getvalue().splitlines() == ["database,pods,ratio", "x.db,2,inf"]


@pytest.mark.parametrize(("fmt", "loaded"), [("json", False), ("table", False), ("yaml", True)])
def test_pyyaml_is_imported_only_for_yaml_output(tmp_path: Path, fmt: str, loaded: bool) -> None:
    """PyYAML's resolvers decide which strings YAML must quote; nothing else needs it."""
    from podstore import PodStore

    db = tmp_path / "s.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "r", {0: ["true", "1.0"]}, b"")
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('yaml' in sys.modules, file=sys.stderr))\n"
        "from podstore.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--db", str(db), "devices", "-o", fmt],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == str(loaded)


def test_json_of_many_batches_is_exactly_json_dumps_of_all_rows() -> None:
    """Rows are encoded a batch at a time and spliced: across batch boundaries too the text is
    json.dumps(rows, indent=2)'s (non-finite floats as strings)."""
    from podstore.cli.output import BATCH_ROWS

    n = 2 * BATCH_ROWS + 7
    rows = [
        {"a": f"x{i}", "b": [str(i), "y"] if i % 3 else [], "c": {"0": ["d"]}, "f": i / 7}
        for i in range(n)
    ]
    rows[BATCH_ROWS + 1]["f"] = math.inf
    want = json.loads(json.dumps(rows))
    want[BATCH_ROWS + 1]["f"] = "Infinity"
    assert render(rows, ["a", "b", "c", "f"], "json") == json.dumps(want, indent=2)
    assert render([], ["a"], "json") == json.dumps([], indent=2)
