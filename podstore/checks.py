"""The self-check: SQLite's own integrity checks plus the store's invariants.

:func:`verify` opens a store file read-only and returns a list of :class:`Finding`; it never
writes and never repairs. :func:`check_connection` runs the same checks on an open sqlite3
connection (the crash harnesses use it after every simulated crash).

Severity ``error`` means the file is damaged or holds a state no podstore call produces
(a half-applied write, or an edit from outside); ``warning`` means something legal but worth
a look. ``podstore verify`` exits 1 when any finding is an error.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from podstore import codec
from podstore.engine import (
    ConnectOptions,
    connect,
    database_path,
    head_revision,
    translate,
)
from podstore.errors import InvalidInputError, PodStoreError

Severity = Literal["error", "warning"]

#: How many offending rows one finding names before it says "and N more".
MAX_EXAMPLES = 10


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found: how bad, which check found it, and what it is."""

    severity: Severity
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.check}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "check": self.check, "message": self.message}


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any finding has severity ``error``."""
    return any(f.severity == "error" for f in findings)


def verify(path: str | os.PathLike[str], *, quick: bool = False) -> list[Finding]:
    """Check the store at ``path`` (a path or sqlite URL), read-only; [] means all is well.

    ``quick=True`` runs ``PRAGMA quick_check`` (b-tree structure only) instead of the full
    ``integrity_check`` (which also matches every index against its table).
    Raises InvalidInputError when ``path`` is not a file; a file SQLite cannot open at all is
    reported as an ``open`` finding, not raised.
    """
    options = ConnectOptions(path=database_path(path), readonly=True)
    if not os.path.isfile(options.path):
        raise InvalidInputError(f"database: {options.path} does not exist or is not a file")
    try:
        conn = connect(options)
    except PodStoreError as exc:
        return [Finding("error", "open", f"{type(exc).__name__}: {exc}")]
    try:
        return check_connection(conn, quick=quick)
    finally:
        conn.close()


def check_connection(conn: sqlite3.Connection, *, quick: bool = False) -> list[Finding]:
    """Run every check on ``conn`` inside one read transaction (a consistent snapshot).

    ``conn`` must be in autocommit mode (``isolation_level=None``) and not in a transaction.
    """
    findings: list[Finding] = []
    try:
        conn.execute("BEGIN")
    except sqlite3.Error as exc:
        return [_raised("open", exc)]
    try:
        findings.extend(_integrity(conn, quick))
        if findings:
            # Invariant queries over a damaged b-tree may fail or mislead; the damage is the
            # finding that matters.
            return findings
        tables = _tables(conn)
        findings.extend(_schema(conn, tables))
        for name, check in _INVARIANTS:
            try:
                findings.extend(check(conn, tables))
            except sqlite3.Error as exc:
                findings.append(_raised(name, exc))
    finally:
        if conn.in_transaction:
            # nothing was written; ending the read on a damaged file may fail, harmlessly
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
    return findings


# ---- SQLite's own checks ---------------------------------------------------------------------


def _raised(check: str, exc: sqlite3.Error) -> Finding:
    mapped = translate(exc)
    return Finding("error", check, f"{type(mapped or exc).__name__}: {mapped or exc}")


def _integrity(conn: sqlite3.Connection, quick: bool) -> list[Finding]:
    pragma = "quick_check" if quick else "integrity_check"
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}(100)")]
    except sqlite3.Error as exc:
        return [_raised(pragma, exc)]
    if rows == ["ok"]:
        return []
    return [Finding("error", pragma, row) for row in rows]


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }


_STORE_TABLES = (
    "pods",
    "containers",
    "allocations",
    "allocation_devices",
    "empty_numa_lists",
    "registered_resources",
    "registered_devices",
    "store_meta",
)


def _schema(conn: sqlite3.Connection, tables: set[str]) -> list[Finding]:
    out: list[Finding] = []
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if mode != "wal":
        out.append(
            Finding("warning", "journal_mode", f"journal mode is {mode!r}, podstore uses 'wal'")
        )
    if "alembic_version" not in tables:
        out.append(Finding("error", "schema", "no alembic_version table: not a podstore database"))
    else:
        versions = [str(r[0]) for r in conn.execute("SELECT version_num FROM alembic_version")]
        head = head_revision()
        if versions != [head]:
            out.append(
                Finding(
                    "error",
                    "schema",
                    f"schema revision {', '.join(versions) or 'none'}, not the head {head} "
                    "(`podstore migrate upgrade` or a writable open brings it there)",
                )
            )
    missing = [t for t in _STORE_TABLES if t not in tables]
    if missing:
        out.append(Finding("error", "schema", f"missing tables: {', '.join(missing)}"))
    return out


# ---- the store's invariants -------------------------------------------------------------------


def _listed(rows: Sequence[Any], fmt: Callable[[Any], str]) -> str:
    shown = ", ".join(fmt(r) for r in rows[:MAX_EXAMPLES])
    more = len(rows) - MAX_EXAMPLES
    return shown + (f" and {more} more" if more > 0 else "")


def _rows_check(
    name: str,
    severity: Severity,
    needs: tuple[str, ...],
    sql: str,
    what: str,
    fmt: Callable[[Any], str],
) -> tuple[str, Callable[[sqlite3.Connection, set[str]], list[Finding]]]:
    """A check that reports the rows ``sql`` returns (none: all is well)."""

    def run(conn: sqlite3.Connection, tables: set[str]) -> list[Finding]:
        if not all(t in tables for t in needs):
            return []
        rows = conn.execute(sql).fetchall()
        if not rows:
            return []
        return [Finding(severity, name, f"{len(rows)} {what}: {_listed(rows, fmt)}")]

    return name, run


def _entry(r: Any) -> str:
    return f"{r[0]}/{r[1]}/{r[2]}"


# Each query names the rows that break one rule. Every statement is constant text.
_INVARIANTS: list[tuple[str, Callable[[sqlite3.Connection, set[str]], list[Finding]]]] = [
    _rows_check(
        "orphan-containers",
        "error",
        ("containers", "pods"),
        "SELECT c.id, c.pod_id, c.name FROM containers c "
        "WHERE NOT EXISTS (SELECT 1 FROM pods p WHERE p.id = c.pod_id) ORDER BY c.id",
        "containers whose pod does not exist",
        lambda r: f"container {r[2]!r} (id {r[0]}, pod id {r[1]})",
    ),
    _rows_check(
        "orphan-allocations",
        "error",
        ("allocations", "containers", "pods"),
        "SELECT a.id, a.container_id, a.resource FROM allocations a "
        "LEFT JOIN containers c ON c.id = a.container_id "
        "WHERE c.id IS NULL OR NOT EXISTS (SELECT 1 FROM pods p WHERE p.id = c.pod_id) "
        "ORDER BY a.id",
        "allocations whose container or pod does not exist",
        lambda r: f"allocation {r[0]} ({r[2]!r}, container id {r[1]})",
    ),
    _rows_check(
        "orphan-device-rows",
        "error",
        ("allocation_devices", "allocations"),
        "SELECT d.allocation_id, d.numa_node, d.position, d.device_id FROM allocation_devices d "
        "WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.id = d.allocation_id) "
        "ORDER BY 1, 2, 3",
        "device rows whose allocation does not exist",
        lambda r: f"{r[3]!r} (allocation {r[0]}, NUMA {r[1]})",
    ),
    _rows_check(
        "orphan-empty-lists",
        "error",
        ("empty_numa_lists", "allocations"),
        "SELECT e.allocation_id, e.numa_node FROM empty_numa_lists e "
        "WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.id = e.allocation_id) "
        "ORDER BY 1, 2",
        "empty NUMA list markers whose allocation does not exist",
        lambda r: f"allocation {r[0]} NUMA {r[1]}",
    ),
    _rows_check(
        "orphan-registered-devices",
        "error",
        ("registered_devices", "registered_resources"),
        "SELECT d.resource, d.position, d.device_id FROM registered_devices d "
        "WHERE NOT EXISTS (SELECT 1 FROM registered_resources r WHERE r.resource = d.resource) "
        "ORDER BY 1, 2",
        "registered devices whose resource is not registered",
        lambda r: f"{r[2]!r} of {r[0]!r}",
    ),
    _rows_check(
        "empty-pods",
        "error",
        ("pods", "containers"),
        "SELECT p.id, p.uid FROM pods p "
        "WHERE NOT EXISTS (SELECT 1 FROM containers c WHERE c.pod_id = p.id) ORDER BY p.id",
        "pods without any container (no podstore call leaves one)",
        lambda r: repr(r[1]),
    ),
    _rows_check(
        "empty-containers",
        "error",
        ("containers", "allocations", "pods"),
        "SELECT p.uid, c.name FROM containers c JOIN pods p ON p.id = c.pod_id "
        "WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.container_id = c.id) "
        "ORDER BY c.id",
        "containers without any resource entry (no podstore call leaves one)",
        lambda r: f"{r[0]}/{r[1]}",
    ),
    _rows_check(
        "positions",
        "error",
        ("allocation_devices", "allocations", "containers", "pods"),
        "SELECT p.uid, c.name, a.resource, d.numa_node, count(*), min(d.position), "
        "max(d.position) "
        "FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "GROUP BY d.allocation_id, d.numa_node "
        "HAVING min(d.position) <> 0 OR max(d.position) <> count(*) - 1 "
        "ORDER BY d.allocation_id, d.numa_node",
        "NUMA device lists whose positions are not 0..n-1",
        lambda r: f"{_entry(r)} NUMA {r[3]} ({r[4]} rows, positions {r[5]}..{r[6]})",
    ),
    _rows_check(
        "registered-positions",
        "error",
        ("registered_devices",),
        "SELECT resource, count(*), min(position), max(position) FROM registered_devices "
        "GROUP BY resource HAVING min(position) <> 0 OR max(position) <> count(*) - 1 "
        "ORDER BY resource",
        "registered device lists whose positions are not 0..n-1",
        lambda r: f"{r[0]!r} ({r[1]} rows, positions {r[2]}..{r[3]})",
    ),
    _rows_check(
        "empty-list-with-devices",
        "error",
        ("empty_numa_lists", "allocation_devices", "allocations", "containers", "pods"),
        "SELECT p.uid, c.name, a.resource, e.numa_node FROM empty_numa_lists e "
        "JOIN allocations a ON a.id = e.allocation_id "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "WHERE EXISTS (SELECT 1 FROM allocation_devices d "
        "              WHERE d.allocation_id = e.allocation_id AND d.numa_node = e.numa_node) "
        "ORDER BY e.allocation_id, e.numa_node",
        "NUMA lists marked empty that also hold devices",
        lambda r: f"{_entry(r)} NUMA {r[3]}",
    ),
    _rows_check(
        "null-map-with-devices",
        "error",
        ("allocations", "allocation_devices", "empty_numa_lists", "containers", "pods"),
        "SELECT p.uid, c.name, a.resource FROM allocations a "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "WHERE a.device_ids_null "
        "AND (EXISTS (SELECT 1 FROM allocation_devices d WHERE d.allocation_id = a.id) "
        "     OR EXISTS (SELECT 1 FROM empty_numa_lists e WHERE e.allocation_id = a.id)) "
        "ORDER BY a.id",
        "entries whose device map is null yet lists NUMA nodes",
        _entry,
    ),
    _rows_check(
        "null-response-flag",
        "error",
        ("allocations", "containers", "pods"),
        "SELECT p.uid, c.name, a.resource FROM allocations a "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "WHERE a.alloc_resp_json_null AND (a.alloc_resp IS NULL OR length(a.alloc_resp) <> 0) "
        "ORDER BY a.id",
        "entries flagged as a null AllocResp that hold something other than an empty response",
        _entry,
    ),
    _rows_check(
        "duplicate-devices",
        "warning",
        ("allocation_devices", "allocations", "containers", "pods"),
        "SELECT p.uid, c.name, a.resource, d.numa_node, d.device_id, count(*) "
        "FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "GROUP BY d.allocation_id, d.numa_node, d.device_id HAVING count(*) > 1 "
        "ORDER BY d.allocation_id, d.numa_node, d.device_id",
        # Kubelet builds each list from a set, so a duplicate can only have come in with a
        # checkpoint file or a caller's list; podstore keeps lists as given (exports must
        # match byte for byte), so this is worth a look but not damage.
        "devices listed more than once in one NUMA list (kept as given; kubelet's own "
        "allocations never repeat a device, so these came from a checkpoint or a caller)",
        lambda r: f"{r[4]!r} x{r[5]} in {_entry(r)} NUMA {r[3]}",
    ),
    _rows_check(
        "store-meta",
        "warning",
        ("store_meta",),
        "SELECT key, value FROM store_meta "
        "WHERE (key = 'entries_json' AND value NOT IN ('null', '[]')) "
        "OR (key = 'registered_json_null' AND value NOT IN ('0', '1')) ORDER BY key",
        "store_meta values podstore does not write",
        lambda r: f"{r[0]}={r[1]!r}",
    ),
]


def _responses(conn: sqlite3.Connection, tables: set[str]) -> list[Finding]:
    """Every stored AllocResp decodes (insert and restore refuse or skip ones that do not)."""
    if not {"allocations", "containers", "pods"} <= tables:
        return []
    bad: list[tuple[str, str, str, str]] = []
    for uid, name, resource, resp in conn.execute(
        "SELECT p.uid, c.name, a.resource, a.alloc_resp FROM allocations a "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id "
        "WHERE a.alloc_resp IS NOT NULL ORDER BY a.id"
    ):
        if not isinstance(resp, bytes):
            bad.append((uid, name, resource, f"stored as {type(resp).__name__}, not a BLOB"))
            continue
        reason = codec.decode_error(resp)
        if reason is not None:
            bad.append((uid, name, resource, reason))
    if not bad:
        return []
    return [
        Finding(
            "error",
            "responses",
            f"{len(bad)} AllocResp values do not decode as ContainerAllocateResponse: "
            + _listed(bad, lambda r: f"{_entry(r)} ({r[3]})"),
        )
    ]


def _foreign_keys(conn: sqlite3.Connection, tables: set[str]) -> list[Finding]:
    """SQLite's own foreign key check, for tables the explicit orphan checks do not cover."""
    covered = {
        "containers",
        "allocations",
        "allocation_devices",
        "empty_numa_lists",
        "registered_devices",
    }
    rows = [r for r in conn.execute("PRAGMA foreign_key_check") if r[0] not in covered]
    if not rows:
        return []
    return [
        Finding(
            "error",
            "foreign-keys",
            f"{len(rows)} rows break a foreign key: "
            + _listed(rows, lambda r: f"{r[0]} rowid {r[1]} → {r[2]}"),
        )
    ]


_INVARIANTS.append(("responses", _responses))
_INVARIANTS.append(("foreign-keys", _foreign_keys))
