"""Every check of the self-check (`podstore verify`) finds the damage it is there for.

For each check in podstore/storage/selfcheck.py, a clean store (every shape the checkpoint
knows: null and empty NUMA maps and lists, null and empty responses, nil responses, registered
devices) is copied and broken with raw SQL the way only an edit from outside, or a bug, could
break it; then `check_store` must report that check — that check alone, with its severity —
and `podstore verify` must exit 1 for an error (0 for a warning, 1 with ``--strict``). A check
added to selfcheck.py without a case here fails ``test_every_check_has_a_damage_case``.

Damage SQLite itself sees (bytes over a page, a cut file) is tests/test_reliability_damage.py's.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness import workload
from harness.figures import report

from podstore import PodDevicesEntry, PodStore
from podstore.cli.main import cli
from podstore.storage import selfcheck
from podstore.storage.selfcheck import check_store

# An allocation with device rows in a NUMA list of at least two, the last of them.
_LIST = (
    "SELECT allocation_id, numa_node, max(position) AS last FROM allocation_devices "
    "GROUP BY allocation_id, numa_node HAVING count(*) >= 2 ORDER BY 1, 2 LIMIT 1"
)
_WITH_RESPONSE = (
    "SELECT min(id) FROM allocations WHERE length(alloc_resp) > 0 AND NOT alloc_resp_json_null"
)

# check → (severity, damage statements, words the finding must contain)
CASES: dict[str, tuple[str, list[str], str]] = {
    "orphan-containers": (
        "error",
        ["INSERT INTO containers (pod_id, name) VALUES (999999, 'ghost')"],
        "container 'ghost'",
    ),
    "orphan-allocations": (
        "error",
        [
            "INSERT INTO allocations (container_id, resource, device_ids_null, alloc_resp, "
            "alloc_resp_json_null) VALUES (999999, 'ghost.com/r', 1, NULL, 0)"
        ],
        "'ghost.com/r'",
    ),
    "orphan-device-rows": (
        "error",
        [
            "INSERT INTO allocation_device_spans (allocation_id, since_seq, numa_node, position, "
            "device_id) VALUES (999999, 0, 0, 0, 'ghost-dev')"
        ],
        "'ghost-dev'",
    ),
    "orphan-empty-lists": (
        "error",
        ["INSERT INTO empty_numa_lists VALUES (999999, 3, 0)"],
        "allocation 999999 NUMA 3",
    ),
    "orphan-registered-devices": (
        "error",
        ["INSERT INTO registered_devices VALUES ('ghost.com/r', 0, 'ghost-dev')"],
        "'ghost-dev' of 'ghost.com/r'",
    ),
    "empty-pods": ("error", ["INSERT INTO pods (uid) VALUES ('shell-pod')"], "'shell-pod'"),
    "empty-containers": (
        "error",
        ["INSERT INTO containers (pod_id, name) SELECT min(id), 'shell' FROM pods"],
        "/shell",
    ),
    "positions": (
        "error",
        [
            f"UPDATE allocation_device_spans SET position = position + 10 WHERE until_seq IS "
            f"NULL AND (allocation_id, numa_node, position) = (SELECT allocation_id, numa_node, "
            f"last FROM ({_LIST}))"
        ],
        "positions 0..",
    ),
    "registered-positions": (
        "error",
        ["UPDATE registered_devices SET position = 99 WHERE position = 3"],
        "positions 0..99",
    ),
    "empty-list-with-devices": (
        "error",
        [
            f"INSERT INTO empty_numa_lists SELECT allocation_id, numa_node, 0 FROM ({_LIST})",
        ],
        "NUMA",
    ),
    "null-map-with-devices": (
        "error",
        [
            "UPDATE allocations SET device_ids_null = 1 "
            f"WHERE id = (SELECT allocation_id FROM ({_LIST}))"
        ],
        "1 entries whose device map is null",
    ),
    "null-response-flag": (
        "error",
        [f"UPDATE allocations SET alloc_resp_json_null = 1 WHERE id = ({_WITH_RESPONSE})"],
        "1 entries flagged as a null AllocResp",
    ),
    "duplicate-devices": (
        "warning",
        [
            # the list's first device once more at its end, as of the same event
            f"INSERT INTO allocation_device_spans (allocation_id, since_seq, numa_node, "
            f"position, device_id) SELECT d.allocation_id, d.since_seq, d.numa_node, l.last + 1, "
            f"d.device_id FROM allocation_device_spans d JOIN ({_LIST}) l ON l.allocation_id = "
            f"d.allocation_id AND l.numa_node = d.numa_node WHERE d.position = 0 AND "
            f"d.until_seq IS NULL"
        ],
        "x2 in",
    ),
    "store-meta": (
        "warning",
        ["UPDATE store_meta SET value = 'maybe' WHERE key = 'registered_json_null'"],
        "registered_json_null='maybe'",
    ),
    "responses": (
        "error",
        [f"UPDATE allocations SET alloc_resp = x'ffffffff' WHERE id = ({_WITH_RESPONSE})"],
        "do not decode",
    ),
    "store-id": ("error", ["DELETE FROM store_meta WHERE key = 'store_id'"], "no store_id"),
    "foreign-keys": (
        "error",
        ["INSERT INTO event_device_rows (seq, device_id) VALUES (999999, 'ghost')"],
        "event_device_rows",
    ),
    "event-devices": (
        "error",
        ["DELETE FROM event_device_rows WHERE seq = (SELECT min(seq) FROM event_device_rows)"],
        "missing",
    ),
    "spans": (
        "error",
        [
            "UPDATE allocation_device_spans SET until_released = 0 WHERE allocation_id = "
            "(SELECT min(allocation_id) FROM allocation_device_spans WHERE until_seq IS NULL) "
            "AND until_seq IS NULL"
        ],
        "open yet says how it ended",
    ),
    "history-chain": (
        "error",
        [
            "DROP TRIGGER tr_allocation_events_append_only",
            "UPDATE allocation_events SET ts = '2020-01-01T00:00:00.000000Z' WHERE seq = 5",
        ],
        "seq 5 (edited)",
    ),
    # The node's other managers (revision 0007): rows a podstore write never leaves.
    "cpu-two-pods": (
        "error",
        [
            "INSERT INTO cpu_assignments (id, pod_uid, container) VALUES (901, 'pa', 'c'), "
            "(902, 'pb', 'c')",
            "INSERT INTO cpu_assignment_cpus VALUES (901, 7), (902, 7)",
        ],
        "CPU 7",
    ),
    "cpu-also-shared": (
        "error",
        [
            "INSERT INTO cpu_assignments (id, pod_uid, container) VALUES (903, 'pa', 'c')",
            "INSERT INTO cpu_assignment_cpus VALUES (903, 3)",
            "INSERT INTO cpu_shared VALUES (3)",
        ],
        "CPU 3 (pa/c)",
    ),
    "memory-over-allocatable": (
        "error",
        [
            "INSERT INTO memory_numa_nodes (numa_node) VALUES (0)",
            "INSERT INTO memory_numa_tables (numa_node, memory_type, allocatable, reserved) "
            "VALUES (0, 'memory', 10, 11)",
        ],
        "NUMA 0 memory (11 > 10 bytes)",
    ),
    "dra-device-two-claims": (
        "error",
        [
            "INSERT INTO dra_claims (id, position, claim_uid, claim_name, namespace) "
            "VALUES (1, 0, 'u1', 'a', 'ns'), (2, 1, 'u2', 'b', 'ns')",
            "INSERT INTO dra_claim_drivers (claim_id, driver) VALUES (1, 'd'), (2, 'd')",
            "INSERT INTO dra_devices (claim_id, driver, position, pool, device) "
            "VALUES (1, 'd', 0, 'p', 'dev'), (2, 'd', 0, 'p', 'dev')",
        ],
        "d/p/dev (2 claims)",
    ),
    "orphan-block-numa": (
        "error",
        [
            "INSERT INTO memory_assignments (id, pod_uid, container) VALUES (5, 'pa', 'c')",
            "INSERT INTO memory_block_numa VALUES (5, 0, 0, 1)",
        ],
        "assignment 5 block 0",
    ),
    "orphan-dra-devices": (
        "error",
        [
            "INSERT INTO dra_claims (id, position, claim_uid, claim_name, namespace) "
            "VALUES (3, 0, 'u3', 'a', 'ns')",
            "INSERT INTO dra_devices (claim_id, driver, position, pool, device) "
            "VALUES (3, 'd', 0, 'p', 'dev')",
        ],
        "claim id 3 'd'",
    ),
    # Revision 0008: node_items holds each item as its rows say.
    "node-items": (
        "error",
        ["INSERT INTO pod_names (pod_uid, namespace, name) VALUES ('pa', 'ns', 'n')"],
        'names ["pa",null,"pod-name"]',
    ),
    "schema": ("error", ["UPDATE alembic_version SET version_num = '0000'"], "revision 0000"),
    "journal_mode": ("warning", ["PRAGMA journal_mode = DELETE"], "'delete'"),
}
# A second case for checks that tell several kinds of break apart.
MORE_CASES: list[tuple[str, str, list[str], str]] = [
    (
        "responses",
        "error",
        [f"UPDATE allocations SET alloc_resp = 'text' WHERE id = ({_WITH_RESPONSE})"],
        "not a BLOB",
    ),
    (
        "store-id",
        "error",
        ["UPDATE store_meta SET value = 'node-7' WHERE key = 'store_id'"],
        "not a UUID",
    ),
    (
        "store-meta",
        "warning",
        ["UPDATE store_meta SET value = '{}' WHERE key = 'entries_json'"],
        "entries_json='{}'",
    ),
    (
        "null-response-flag",
        "error",
        ["UPDATE allocations SET alloc_resp_json_null = 1 WHERE alloc_resp IS NULL"],
        "flagged as a null AllocResp",
    ),
    ("schema", "error", ["DROP TABLE registered_devices"], "missing tables: registered_devices"),
    ("schema", "error", ["DROP TABLE alembic_version"], "no alembic_version table"),
    (
        "event-devices",
        "error",
        [
            "INSERT INTO event_device_rows (seq, device_id, released) "
            "SELECT min(seq), 'ghost-dev', 1 FROM allocation_events"
        ],
        "'ghost-dev' (released): not named by the event",
    ),
    (
        "event-devices",
        "error",
        [
            "UPDATE allocation_device_spans SET until_released = 1 - until_released "
            "WHERE (allocation_id, since_seq, numa_node, position) = (SELECT allocation_id, "
            "since_seq, numa_node, position FROM allocation_device_spans "
            "WHERE until_released IS NOT NULL ORDER BY 1, 2, 3, 4 LIMIT 1)"
        ],
        "not named by the event",
    ),
    (
        "responses",
        "error",
        [
            'UPDATE allocations SET response = \'{"envs":[["GHOST","x"]]}\' '
            f"WHERE id = ({_WITH_RESPONSE})"
        ],
        "decoded JSON (allocations.response) differs",
    ),
    (
        "history-chain",
        "error",
        [
            "DROP TRIGGER tr_allocation_events_append_only",
            "UPDATE allocation_events SET hash = zeroblob(32) WHERE seq = 7",
        ],
        "seq 7 (hash-edited)",
    ),
    (
        "history-chain",
        "error",
        ["DELETE FROM allocation_events WHERE pod_uid = 'shape-null-map'"],
        "(removed)",
    ),
    (
        "history-chain",
        "error",
        ["INSERT INTO history_chain_links (seq, prev_hash) VALUES (5, zeroblob(32))"],
        "seq 5 (link-forged)",
    ),
    (
        "history-chain",
        "error",
        [
            "UPDATE store_meta SET value = '00000000-0000-4000-8000-000000000000' "
            "WHERE key = 'store_id'"
        ],
        "seq 1 (genesis)",
    ),
    (
        "schema",
        "warning",
        ["DROP TRIGGER tr_allocation_events_append_only"],
        "tr_allocation_events_append_only is missing",
    ),
]
# Checks whose damage SQLite itself sees, tested byte by byte in test_reliability_damage.py.
SQLITE_CHECKS = {"integrity_check", "quick_check", "open"}

ALL_CASES = [pytest.param(c, *v, id=c) for c, v in CASES.items()] + [
    pytest.param(*case, id=f"{case[0]}-{i}") for i, case in enumerate(MORE_CASES, 2)
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("invariants") / "pristine.db"
    with PodStore.open(db) as store:
        for i in range(200):
            workload.apply(store, workload.make_op(7, i))
        store.insert("shape-null-map", "c", "r", None, b"")
        store.insert("shape-nil-response", "c", "r", {0: ["n-0", "n-1"]}, None)
        store.insert("shape-empty-lists", "c", "r", {0: [], 1: None, 2: ["e-0", "e-1"]}, b"")
        store.from_checkpoint_data([PodDevicesEntry("shape-null-resp", "c", "r", {}, None)])
        store.set_registered_devices({"example.com/gpu": [f"dev-{i}" for i in range(6)]})
    assert check_store(db) == []
    return db


def _broken(pristine: Path, tmp_path: Path, statements: list[str]) -> Path:
    db = tmp_path / "broken.db"
    shutil.copy(pristine, db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")  # an edit from outside: nothing cascades
        for sql in statements:
            cur = conn.execute(sql)
            assert sql.startswith(("PRAGMA", "DROP")) or cur.rowcount > 0, f"changed nothing: {sql}"
    finally:
        conn.close()
    return db


def _verify(db: Path, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "verify", *options])
    return result.exit_code, result.output


@pytest.mark.parametrize(("check", "severity", "statements", "words"), ALL_CASES)
def test_each_check_finds_its_damage(
    pristine: Path, tmp_path: Path, check: str, severity: str, statements: list[str], words: str
) -> None:
    db = _broken(pristine, tmp_path, statements)
    findings = check_store(db)
    # Damage that drops the append-only trigger to edit the history is also reported for that.
    dropped = any(s.startswith("DROP TRIGGER") for s in statements) and check != "schema"
    expected = {(check, severity)} | ({("schema", "warning")} if dropped else set())
    assert {(f.check, f.severity) for f in findings} == expected, findings
    assert any(words in f.message for f in findings), findings
    code, out = _verify(db)
    strict, _ = _verify(db, "--strict")
    assert check in out
    assert code == (1 if severity == "error" else 0), out
    assert strict == 1
    report(
        "invariant-damage",
        check=check,
        severity=severity,
        damage=[_shown(sql) for sql in statements],
        finding=str(next(f for f in findings if f.check == check)),
        verify_exit=code,
        strict_exit=strict,
    )


def _shown(sql: str) -> str:
    """The statement as docs/reliability.md shows it, its target subqueries named."""
    return sql.replace(f"({_LIST})", "LIST").replace(f"({_WITH_RESPONSE})", "FIRST_WITH_RESPONSE")


def test_every_check_has_a_damage_case() -> None:
    names = {name for name, _ in selfcheck._INVARIANTS} | {"schema", "journal_mode"}
    assert names == set(CASES), f"checks without a damage case: {names - set(CASES)}"
    # and the ones SQLite sees are tested where bytes are damaged
    damage = (Path(__file__).parent / "test_reliability_damage.py").read_text()
    assert all(name in damage for name in ("integrity_check", "quick", "StoreCorruptError"))
    assert {"integrity_check", "quick_check", "open"} == SQLITE_CHECKS


def test_a_dropped_view_that_checks_read_is_an_error_not_a_skip(
    pristine: Path, tmp_path: Path
) -> None:
    # A check whose table is missing is skipped (the schema check names the table), but the
    # views the checks read are not tables: without one, every check reading it must fail.
    db = _broken(pristine, tmp_path, ["DROP VIEW allocation_devices"])
    findings = check_store(db)
    assert findings and all(f.severity == "error" for f in findings), findings
    assert all("no such table: allocation_devices" in f.message for f in findings), findings
    code, out = _verify(db)
    assert code == 1, out
