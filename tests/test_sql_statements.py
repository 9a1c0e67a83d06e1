"""Every SQL statement of the node store (``podstore/storage/sql/``) is valid over the migrated
schema, and no statement over the store's tables lives anywhere else."""

from __future__ import annotations

import ast
import itertools
import re
import sqlite3
from pathlib import Path

import pytest

import podstore
from podstore import PodStore
from podstore.storage.sql import (
    audit,
    cdi,
    checks,
    entries,
    events,
    intervals,
    metrics,
    node_checks,
    node_read,
    node_views,
    physical_views,
    pods,
    ship,
    sync,
    views,
)
from podstore.storage.sql import (
    node as node_sql,
)

MODULES = (
    entries,
    events,
    views,
    audit,
    checks,
    sync,
    metrics,
    pods,
    ship,
    node_sql,
    node_checks,
    node_read,
    node_views,
    cdi,
    physical_views,
    intervals,
)
PACKAGE = Path(podstore.__file__).parent


#: A module's ``SETUP`` statements create the TEMP tables its other statements use; they are
#: run (not compiled) on the connection before every statement is compiled.
SETUP: tuple[str, ...] = tuple(s for m in MODULES for s in getattr(m, "SETUP", ()))


def _statements() -> dict[str, str]:
    found: dict[str, str] = {}
    for module in MODULES:
        topic = module.__name__.rsplit(".", 1)[1]
        for name, value in vars(module).items():
            if name == "SETUP":
                continue
            if name.isupper() and not name.startswith("_"):
                if isinstance(value, str):
                    found[f"{topic}.{name}"] = value
                elif isinstance(value, tuple) and all(isinstance(v, str) for v in value):
                    for i, v in enumerate(value):
                        found[f"{topic}.{name}[{i}]"] = v
    # The views as CREATE statements, and the history query for every set of filters.
    for name, create in views.VIEWS + views.TRIGGERS:
        found[f"views.{name}"] = create
    for name, create in node_views.NODE_VIEWS:
        found[f"node_views.{name}"] = create
    for name, create in intervals.INTERVAL_VIEWS:
        found[f"intervals.{name}"] = create
    for by in intervals.USAGE_GROUPS:
        for one in (False, True):
            found[f"intervals.usage_sql({by}, {one})"] = intervals.usage_sql(by, one)
    for name, create in physical_views.PHYSICAL_VIEWS:
        found[f"physical_views.{name}"] = create
    for n in range(len(events.HISTORY_FILTERS) + 1):
        for combo in itertools.combinations(sorted(events.HISTORY_FILTERS), n):
            found[f"events.history_sql{combo}"] = events.history_sql(combo)
    return found


STATEMENTS = _statements()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("queries") / "store.db"
    PodStore.open(path).close()
    return path


def test_there_are_statements_to_check() -> None:
    names = {n.split(".", 1)[1] for n in STATEMENTS}
    assert {"PODS", "CONTAINER_DEVICES", "RESOURCE_DEVICES_JSON", "ENTRIES_WITH_RESPONSE"} <= names
    assert {"OWNERS_AT", "PRUNE", "INSERT_EVENT", "RUN_OPTIONS_FOR_CONTAINER"} <= names
    assert {"ORPHAN_CONTAINERS", "INSERT_SPAN", "CLOSE_SPANS", "OWNERS_NOW"} <= names
    assert {"PAIR", "CHANGED_DEVICES", "CHANGED_RESPONSES", "CHANGED_REGISTERED"} <= names
    assert {"HIGH_WATER", "EVENTS_AFTER", "EVENT_DEVICES_BETWEEN"} <= names


def test_setup_creates_temp_tables_only_and_can_run_again(migrated: Path) -> None:
    """SETUP runs on every sync's connection: idempotent, and never touches the store file's
    own schema."""
    assert SETUP and all(re.match(r"\s*CREATE TEMP TABLE IF NOT EXISTS ", s) for s in SETUP)
    conn = sqlite3.connect(migrated)
    try:
        before = conn.execute("SELECT name, sql FROM sqlite_schema ORDER BY name").fetchall()
        for _ in range(2):
            for statement in SETUP:
                conn.execute(statement)
        after = conn.execute("SELECT name, sql FROM sqlite_schema ORDER BY name").fetchall()
        temp = {
            r[0] for r in conn.execute("SELECT name FROM temp.sqlite_schema WHERE type = 'table'")
        }
    finally:
        conn.close()
    assert before == after
    assert len(temp) == len(SETUP)


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_statement_prepares_against_the_schema(migrated: Path, name: str) -> None:
    sql = STATEMENTS[name]
    named = sorted(set(re.findall(r"(?<!:):([A-Za-z_]\w*)", sql)))
    numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    positional = max(numbered) if numbered else sql.count("?")
    params: dict[str, None] | tuple[None, ...] = (
        dict.fromkeys(named) if named else (None,) * positional
    )
    conn = sqlite3.connect(migrated)
    try:
        for statement in SETUP:
            conn.execute(statement)
        if sql.lstrip().upper().startswith("CREATE"):
            # A CREATE cannot be EXPLAINed against a schema that already has the object;
            # compile it inside a transaction that is rolled back, under another name.
            conn.execute("BEGIN")
            renamed = re.sub(r"^(\s*CREATE\s+\w+\s+)(\w+)", r"\1\2_compiled", sql)
            conn.execute(renamed)
            conn.execute("ROLLBACK")
        else:
            # EXPLAIN compiles the statement (every table and column must exist) without
            # running it.
            conn.execute("EXPLAIN " + sql, params).fetchall()
    finally:
        conn.close()


#: The node store's tables and views; the fleet's (``v_fleet_*``, on its PostgreSQL server)
#: live in podstore/fleet/.
_STORE_TABLES = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE)\s+(pods|containers|allocations|allocation_devices|"
    r"allocation_device_spans|empty_numa_lists|registered_resources|registered_devices|"
    r"store_meta|response_\w+|allocation_events|allocation_event_devices|event_device_rows|"
    r"node_files|cpu_\w+|memory_\w+|dra_\w+|numa_cpus|pod_names|v_(?!fleet_)\w+)\b",
    re.IGNORECASE,
)


def test_no_statement_over_the_store_tables_lives_outside_storage_sql() -> None:
    """String constants anywhere else in the package that read or write a store table are
    SQL that escaped its room (docstrings are prose and do not count)."""
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("storage/sql/") or rel.startswith("deviceplugin/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and re.search(r"\bSELECT\b|\bINSERT\b|\bDELETE\b|\bUPDATE\b", node.value)
                and _STORE_TABLES.search(node.value)
            ):
                offenders.append(f"{rel}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert offenders == []
