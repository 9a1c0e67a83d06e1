"""``podstore verify``: SQLite's integrity checks plus the store's invariants, read-only.

``error``: damage, or a state no podstore call produces; ``warning``: legal but worth a look.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from podstore.errors import InvalidInputError, PodStoreError
from podstore.pure import alloc_resp
from podstore.sqlite.connection import (
    ConnectOptions,
    connect,
    database_path,
    journal_mode,
    table_names,
)
from podstore.sqlite.files import release_side_files
from podstore.sqlite.migrate import HEAD_REVISION
from podstore.sqlite.translate import translate
from podstore.storage import chain, responses
from podstore.storage.node import codec as node_codec
from podstore.storage.node import sync as node_sync
from podstore.storage.ops import END_EVENT_OPS
from podstore.storage.sql import checks as sql
from podstore.storage.sql import node_checks as node_sql
from podstore.storage.sql import views as views_sql

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


def check_store(path: str | os.PathLike[str], *, quick: bool = False) -> list[Finding]:
    """The findings on the store at ``path`` (a path or sqlite URL); [] means all is well.
    ``quick``: ``PRAGMA quick_check`` instead of ``integrity_check``.

    Raises InvalidInputError when ``path`` is not a file; one SQLite cannot open is an ``open``
    finding.
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
        release_side_files(options.path)  # the read leaves no -wal or -shm behind


def check_connection(conn: sqlite3.Connection, *, quick: bool = False) -> list[Finding]:
    """Every check on ``conn`` (autocommit, not in a transaction) in one read transaction."""
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
        findings.extend(_schema(conn, table_names(conn)))
        for name, check in _INVARIANTS:
            try:
                findings.extend(check(conn))
            except sqlite3.Error as exc:
                if not _table_missing(exc):
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


# The views the checks read: one missing is damage. A missing table is an older revision's (or
# the schema check's finding): the checks reading it are passed over.
_VIEWS_READ = ("allocation_devices", "allocation_event_devices")


def _table_missing(exc: sqlite3.Error) -> bool:
    before, found, name = str(exc).partition("no such table: ")
    return bool(found) and not before and name not in _VIEWS_READ


def _integrity(conn: sqlite3.Connection, quick: bool) -> list[Finding]:
    pragma = "quick_check" if quick else "integrity_check"
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}(100)")]
    except sqlite3.Error as exc:
        return [_raised(pragma, exc)]
    if rows == ["ok"]:
        return []
    return [Finding("error", pragma, row) for row in rows]


_STORE_TABLES = (
    "pods",
    "containers",
    "allocations",
    "allocation_device_spans",
    "empty_numa_lists",
    "registered_resources",
    "registered_devices",
    "store_meta",
)


def _schema(conn: sqlite3.Connection, tables: set[str]) -> list[Finding]:
    out: list[Finding] = []
    mode = journal_mode(conn)
    if mode != "wal":
        out.append(
            Finding("warning", "journal_mode", f"journal mode is {mode!r}, podstore uses 'wal'")
        )
    if "alembic_version" not in tables:
        out.append(Finding("error", "schema", "no alembic_version table: not a podstore database"))
    else:
        versions = [str(r[0]) for r in conn.execute("SELECT version_num FROM alembic_version")]
        head = HEAD_REVISION
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
    triggers = {str(r[0]) for r in conn.execute(sql.TRIGGER_NAMES)}
    # The hash chain still catches an edit made without the trigger; the guard against
    # making one is what is gone.
    missing_trigger = "is missing: nothing stops an UPDATE of the history (the history-chain "
    missing_trigger += "check still finds one)"
    out.extend(
        Finding("warning", "schema", f"trigger {name} {missing_trigger}")
        for name, _create in views_sql.TRIGGERS
        if name not in triggers
    )
    return out


# ---- the store's invariants -------------------------------------------------------------------


def _listed(rows: Sequence[Any], fmt: Callable[[Any], str]) -> str:
    shown = ", ".join(fmt(r) for r in rows[:MAX_EXAMPLES])
    more = len(rows) - MAX_EXAMPLES
    return shown + (f" and {more} more" if more > 0 else "")


def _listing(
    check: str,
    rows: Sequence[Any],
    what: str,
    fmt: Callable[[Any], str],
    severity: Severity = "error",
) -> list[Finding]:
    """One finding naming ``rows`` (none when there are none)."""
    if not rows:
        return []
    return [Finding(severity, check, f"{len(rows)} {what}: {_listed(rows, fmt)}")]


Check = Callable[[sqlite3.Connection], list[Finding]]


def _rows_check(
    name: str, sql: str, what: str, fmt: Callable[[Any], str], *, severity: Severity = "error"
) -> tuple[str, Check]:
    """A check that reports the rows ``sql`` returns (none: all is well)."""
    return name, lambda conn: _listing(name, conn.execute(sql).fetchall(), what, fmt, severity)


def _entry(r: Any) -> str:
    return f"{r[0]}/{r[1]}/{r[2]}"


# Each query names the rows that break one rule. Every statement is constant text.
_ROW_CHECKS: list[tuple[str, Check]] = [
    _rows_check(
        "orphan-containers",
        sql.ORPHAN_CONTAINERS,
        "containers whose pod does not exist",
        lambda r: f"container {r[2]!r} (id {r[0]}, pod id {r[1]})",
    ),
    _rows_check(
        "orphan-allocations",
        sql.ORPHAN_ALLOCATIONS,
        "allocations whose container or pod does not exist",
        lambda r: f"allocation {r[0]} ({r[2]!r}, container id {r[1]})",
    ),
    _rows_check(
        "orphan-device-rows",
        sql.ORPHAN_DEVICE_ROWS,
        "device rows whose allocation does not exist",
        lambda r: f"{r[3]!r} (allocation {r[0]}, NUMA {r[1]})",
    ),
    _rows_check(
        "orphan-empty-lists",
        sql.ORPHAN_EMPTY_LISTS,
        "empty NUMA list markers whose allocation does not exist",
        lambda r: f"allocation {r[0]} NUMA {r[1]}",
    ),
    _rows_check(
        "orphan-registered-devices",
        sql.ORPHAN_REGISTERED_DEVICES,
        "registered devices whose resource is not registered",
        lambda r: f"{r[2]!r} of {r[0]!r}",
    ),
    _rows_check(
        "empty-pods",
        sql.EMPTY_PODS,
        "pods without any container (no podstore call leaves one)",
        lambda r: repr(r[1]),
    ),
    _rows_check(
        "empty-containers",
        sql.EMPTY_CONTAINERS,
        "containers without any resource entry (no podstore call leaves one)",
        lambda r: f"{r[0]}/{r[1]}",
    ),
    _rows_check(
        "positions",
        sql.POSITIONS,
        "NUMA device lists whose positions are not 0..n-1",
        lambda r: f"{_entry(r)} NUMA {r[3]} ({r[4]} rows, positions {r[5]}..{r[6]})",
    ),
    _rows_check(
        "registered-positions",
        sql.REGISTERED_POSITIONS,
        "registered device lists whose positions are not 0..n-1",
        lambda r: f"{r[0]!r} ({r[1]} rows, positions {r[2]}..{r[3]})",
    ),
    _rows_check(
        "empty-list-with-devices",
        sql.EMPTY_LIST_WITH_DEVICES,
        "NUMA lists marked empty that also hold devices",
        lambda r: f"{_entry(r)} NUMA {r[3]}",
    ),
    _rows_check(
        "null-map-with-devices",
        sql.NULL_MAP_WITH_DEVICES,
        "entries whose device map is null yet lists NUMA nodes",
        _entry,
    ),
    _rows_check(
        "null-response-flag",
        sql.NULL_RESPONSE_FLAG,
        "entries flagged as a null AllocResp that hold something other than an empty response",
        _entry,
    ),
    _rows_check(
        "duplicate-devices",
        sql.DUPLICATE_DEVICES,
        "devices listed more than once in one NUMA list (kept as given; kubelet's own "
        "allocations never repeat a device, so these came from a checkpoint or a caller)",
        lambda r: f"{r[4]!r} x{r[5]} in {_entry(r)} NUMA {r[3]}",
        severity="warning",
    ),
    _rows_check(
        "store-meta",
        sql.STORE_META,
        "store_meta values podstore does not write",
        lambda r: f"{r[0]}={r[1]!r}",
        severity="warning",
    ),
    _rows_check(
        "spans",
        sql.SPANS,
        "device spans no podstore write leaves",
        lambda r: f"allocation {r[0]}: {r[1]}",
    ),
    # The node's other managers (revision 0007): states kubelet never writes, kept as the
    # files said (the store mirrors them), and rows no podstore write leaves.
    _rows_check(
        "cpu-two-pods",
        node_sql.CPU_TWO_PODS,
        "exclusive CPUs held by containers of more than one pod",
        lambda r: f"CPU {r[0]} ({r[2]})",
    ),
    _rows_check(
        "cpu-also-shared",
        node_sql.CPU_ALSO_SHARED,
        "exclusive CPUs that are also in the shared pool",
        lambda r: f"CPU {r[0]} ({r[1]}/{r[2]})" if r[2] else f"CPU {r[0]} (pod {r[1]})",
    ),
    _rows_check(
        "memory-over-allocatable",
        node_sql.MEMORY_OVER_ALLOCATABLE,
        "NUMA nodes whose memory reserved is beyond allocatable",
        lambda r: f"NUMA {r[0]} {r[1]} ({r[2]} > {r[3]} bytes)",
    ),
    _rows_check(
        "dra-device-two-claims",
        node_sql.DRA_TWO_CLAIMS,
        "DRA devices in more than one claim without a share id",
        lambda r: f"{r[0]}/{r[1]}/{r[2]} ({r[3]} claims)",
    ),
    _rows_check(
        "orphan-block-numa",
        node_sql.ORPHAN_BLOCK_NUMA,
        "memory block NUMA rows whose block does not exist",
        lambda r: f"assignment {r[0]} block {r[1]} index {r[2]}",
    ),
    _rows_check(
        "orphan-dra-devices",
        node_sql.ORPHAN_DRA_DEVICES,
        "DRA device rows whose claim has no such driver",
        lambda r: f"claim id {r[0]} {r[1]!r} position {r[2]}",
    ),
]


def _responses(conn: sqlite3.Connection) -> list[Finding]:
    """Every stored AllocResp decodes, to the JSON stored beside it."""
    bad: list[tuple[str, str, str, str]] = []
    differs: list[tuple[str, str, str]] = []
    for uid, name, resource, resp, doc in conn.execute(sql.STORED_RESPONSES):
        if not isinstance(resp, bytes):
            bad.append((uid, name, resource, f"stored as {type(resp).__name__}, not a BLOB"))
            continue
        parsed = alloc_resp.parse(resp)
        if isinstance(parsed, str):
            bad.append((uid, name, resource, parsed))
        elif doc != responses.to_json(parsed):
            differs.append((uid, name, resource))
    undecodable = "AllocResp values do not decode as ContainerAllocateResponse"
    differing = (
        "entries whose decoded JSON (allocations.response) differs from what their AllocResp "
        "decodes to"
    )
    return _listing("responses", bad, undecodable, lambda r: f"{_entry(r)} ({r[3]})") + _listing(
        "responses", differs, differing, _entry
    )


def _foreign_keys(conn: sqlite3.Connection) -> list[Finding]:
    """SQLite's own foreign key check, for tables the explicit orphan checks do not cover."""
    covered = {"containers", "allocations", "empty_numa_lists", "registered_devices"}
    rows = [r for r in conn.execute("PRAGMA foreign_key_check") if r[0] not in covered]
    return _listing(
        "foreign-keys", rows, "rows break a foreign key", lambda r: f"{r[0]} rowid {r[1]} → {r[2]}"
    )


def _store_id(conn: sqlite3.Connection) -> list[Finding]:
    """The store's identity is one UUID (the fleet database keys events by it)."""
    count, value = conn.execute(sql.STORE_ID).fetchone()
    if count == 0:
        return [Finding("error", "store-id", "the store has no store_id (revision 0003 adds it)")]
    try:
        uuid.UUID(str(value))
    except ValueError:
        return [Finding("error", "store-id", f"store_id {value!r} is not a UUID")]
    return []


def _named(
    device_ids: str | None, released: str | None, op: str = "", resource: str = ""
) -> set[tuple[str, int]]:
    """(device, released flag) of every device an event's JSON names."""
    out: set[tuple[str, int]] = set()
    if op in END_EVENT_OPS:
        return out  # end evidence names no device
    if node_codec.is_node_op(op):
        payload = None if device_ids is None else json.loads(device_ids)
        out.update((d, 0) for d in node_codec.named_devices(resource, payload) or ())
    elif device_ids is not None:
        value = json.loads(device_ids)
        lists = value.values() if isinstance(value, dict) else [value]
        out.update((d, 0) for ids in lists for d in ids or ())
    if released is not None:
        out.update((d, 1) for d in json.loads(released))
    return out


def _event_devices(conn: sqlite3.Connection) -> list[Finding]:
    """allocation_event_devices names exactly what each kept event names: what owners_at and
    history(device_id=) read is what the hash chain covers."""
    rows = conn.cursor().execute(sql.EVENT_DEVICE_ROWS)
    row = rows.fetchone()
    bad: list[tuple[int, str, int, str]] = []

    def stored_through(seq: int) -> set[tuple[str, int]]:
        nonlocal row
        found: set[tuple[str, int]] = set()
        while row is not None and int(row[0]) <= seq:
            if int(row[0]) < seq:  # rows of an event that names nothing
                bad.append((int(row[0]), str(row[1]), int(row[2]), "not named by the event"))
            else:
                found.add((str(row[1]), int(row[2])))
            row = rows.fetchone()
        return found

    for seq, device_ids, released, op, resource in conn.cursor().execute(sql.EVENT_DEVICE_NAMES):
        try:
            named = _named(device_ids, released, op, resource)
        except (ValueError, TypeError, AttributeError) as exc:
            bad.append((int(seq), "", 0, f"its device JSON does not parse ({exc})"))
            named = set()
        stored = stored_through(int(seq))
        bad.extend((int(seq), d, f, "missing") for d, f in sorted(named - stored))
        bad.extend((int(seq), d, f, "not named by the event") for d, f in sorted(stored - named))
    stored_through(1 << 62)
    bad.sort()
    return _listing(
        "event-devices",
        bad,
        "event device rows that differ from what the events name",
        lambda r: f"seq {r[0]} {r[1]!r} ({'released' if r[2] else 'listed'}): {r[3]}",
    )


def _history_chain(conn: sqlite3.Connection) -> list[Finding]:
    """The history's hash chain holds (storage/chain.py): one finding per break."""
    if _store_id(conn):
        return []  # no identity, no genesis: the store-id finding says so
    report = chain.verify(conn)
    out = [Finding("error", "history-chain", b.message) for b in report.breaks]
    more = report.break_count - len(report.breaks)
    if more > 0:
        out.append(Finding("error", "history-chain", f"and {more} more breaks"))
    return out


def _node_items(conn: sqlite3.Connection) -> list[Finding]:
    try:
        found = node_sync.items_disagreeing(conn)
    except (KeyError, ValueError, TypeError) as exc:  # rows no podstore write leaves
        return [Finding("error", "node-items", f"the items cannot be read back: {exc!r}")]
    if not found:
        return []
    listed = _listed(found, lambda r: f"{r[0]} {r[1]}")
    return [Finding("error", "node-items", f"items node_items does not hold as stored: {listed}")]


_INVARIANTS: list[tuple[str, Check]] = [
    *_ROW_CHECKS,
    ("node-items", _node_items),
    ("responses", _responses),
    ("store-id", _store_id),
    ("event-devices", _event_devices),
    ("history-chain", _history_chain),
    ("foreign-keys", _foreign_keys),
]
