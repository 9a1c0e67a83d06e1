"""Every statement in podstore.queries is valid SQL over the migrated schema."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from podstore import PodStore
from podstore import queries as q

STATEMENTS = {
    name: value
    for name, value in vars(q).items()
    if name.isupper() and isinstance(value, str) and not name.startswith("_")
}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("queries") / "store.db"
    PodStore.open(path).close()
    return path


def test_there_are_statements_to_check() -> None:
    assert {"PODS", "CONTAINER_DEVICES", "DEVICES", "CHECKPOINT_ENTRIES"} <= set(STATEMENTS)


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_statement_prepares_against_the_schema(migrated: Path, name: str) -> None:
    sql = STATEMENTS[name]
    named = sorted(set(re.findall(r"(?<!:):([A-Za-z_]\w*)", sql)))
    params: dict[str, None] | tuple[None, ...] = (
        dict.fromkeys(named) if named else (None,) * sql.count("?")
    )
    conn = sqlite3.connect(migrated)
    try:
        # EXPLAIN compiles the statement (every table and column must exist) without running it.
        conn.execute("EXPLAIN " + sql, params).fetchall()
    finally:
        conn.close()
