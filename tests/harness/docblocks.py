"""The ```sql blocks of the docs, keyed by the heading above each: run by tests/test_audit_docs.py
against the fixture node and, for the blocks that read the fleet's PostgreSQL views, by
tests/fleet/test_fleet_node_state.py against a fleet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"

#: A block that names a fleet table or view runs on the fleet server, not on a node store.
_FLEET = re.compile(r"\b(v_)?fleet_\w+")


def sql_blocks(path: Path) -> Iterator[tuple[str, str]]:
    """(heading above, SQL) for every ```sql block of a markdown file."""
    heading = ""
    in_sql: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if in_sql is not None:
            if line.startswith("```"):
                yield heading, "\n".join(in_sql)
                in_sql = None
            else:
                in_sql.append(line)
        elif line.startswith("```sql"):
            in_sql = []
        elif re.match(r"#{1,6} ", line):
            heading = line.lstrip("#").strip()


def reads_the_fleet(sql: str) -> bool:
    return _FLEET.search(sql) is not None
