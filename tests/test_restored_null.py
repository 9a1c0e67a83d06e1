"""A JSON-null AllocResp, restored: every output says "empty response"; only export says null.

kubelet-semantics.md (``fromCheckpointData`` / ``toCheckpointData``): a null or empty
AllocResp unmarshals into a fresh, *empty* message, so after a restore ``allocResp`` is never
nil, and ``toCheckpointData`` marshals it to empty bytes. podstore keeps a flag
(``alloc_resp_json_null``) only so that an imported file exports byte for byte.

So a store restored from ``"AllocResp":null`` and one restored from ``"AllocResp":""`` must
give the same answer from every read — the API, the views, the decoded response rows, the
history, the operator commands — and differ in exactly one place: the exported file. Each
way in is tried: ``from_checkpoint_data`` one entry at a time and in bulk (over 64 entries),
and ``import_checkpoint`` (replacing and merging).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint, read_checkpoint
from podstore.cli.main import cli

RES = "vendor.com/gpu"
# The entry under test, and company so that the null one sits among others.
NULL_ENTRY = PodDevicesEntry("p-null", "c", RES, {0: ["gpu-0", "gpu-1"], -1: ["gpu-2"]}, None)


def _others(n: int) -> list[PodDevicesEntry]:
    return [PodDevicesEntry(f"p{i}", "c", RES, {1: [f"dev-{i}"]}, b"") for i in range(n)]


def _entries(resp: bytes | None, bulk: bool) -> list[PodDevicesEntry]:
    others = _others(70 if bulk else 2)  # > 64 entries take storage/entries.write_many
    return [*others[:1], dataclasses.replace(NULL_ENTRY, alloc_resp=resp), *others[1:]]


Way = Callable[[PodStore, list[PodDevicesEntry], Path], None]


def _restore(store: PodStore, entries: list[PodDevicesEntry], _tmp: Path) -> None:
    store.from_checkpoint_data(entries)


def _import(merge: bool) -> Way:
    def way(store: PodStore, entries: list[PodDevicesEntry], tmp: Path) -> None:
        path = tmp / f"in-{id(entries)}"
        path.write_bytes(dumps_checkpoint(entries, {RES: ["gpu-0", "gpu-1", "gpu-2"]}))
        if merge:
            store.insert("already-there", "c", RES, {0: ["x"]}, b"")
        store.import_checkpoint(path, merge=merge)

    return way


WAYS = [
    pytest.param(_restore, False, id="restore"),
    pytest.param(_restore, True, id="restore-bulk"),
    pytest.param(_import(False), False, id="import"),
    pytest.param(_import(True), True, id="import-merge-bulk"),
]


def _rows(store: PodStore, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store.query(sql).rows]


#: Columns that hold the time of a write, which differs between the two stores.
_TIMES = {"start", "end"}


def _untimed(store: PodStore, view: str) -> str:
    """SELECT every column of ``view`` but the times of writes."""
    columns = [r[1] for r in _rows(store, f"SELECT * FROM pragma_table_info('{view}')")]
    return "SELECT " + ", ".join(f'"{c}"' for c in columns if c not in _TIMES) + f" FROM {view}"


def _cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _every_output(store: PodStore, db: Path) -> dict[str, Any]:
    """Everything a caller can read about the store, except the exported file."""
    pod, container = NULL_ENTRY.pod_uid, NULL_ENTRY.container_name
    add: dict[str, set[str]] = {RES: {"y"}}
    store.add_container_allocated_resources(pod, container, add)
    remove: dict[str, set[str]] = {RES: {"gpu-0", "y"}}
    store.remove_container_allocated_resources(pod, container, remove)
    views = [r[0] for r in _rows(store, "SELECT name FROM sqlite_master WHERE type = 'view'")]
    response_tables = [
        r[0]
        for r in _rows(
            store,
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name LIKE 'response_%'",
        )
    ]
    assert views and response_tables
    return {
        "to_checkpoint_data": store.to_checkpoint_data(),
        "pod_entries": store.pod_entries(pod),
        "devices": store.devices(),
        "container_devices": store.container_devices(pod, container, RES),
        "pod_devices": store.pod_devices(pod, RES),
        "get_container_devices": store.get_container_devices(pod, container),
        "owner": store.get_pod_and_container_for_device("gpu-1", RES),
        "run_options": store.device_run_container_options(pod, container),
        "run_options_cdi": store.device_run_container_options(
            pod, container, cdi_devices=False, cdi_annotations=True
        ),
        "add": add,
        "remove": remove,
        "stats": store.stats(),
        "registered": store.registered_devices(),
        # timestamps and sequence numbers differ between two stores; the rest must not
        "history": [
            dataclasses.replace(e, seq=0, timestamp=None)  # type: ignore[arg-type]
            for e in store.history()
        ],
        "owners_at": store.owners_at("gpu-2", "2999-01-01T00:00:00Z"),
        "views": {v: sorted(_rows(store, _untimed(store, v)), key=repr) for v in views},
        "response_rows": {t: _rows(store, f"SELECT * FROM {t}") for t in response_tables},
        "cli": {
            "get": _cli(db, "get", pod),
            "pods": _cli(db, "pods"),
            "devices": _cli(db, "devices"),
            "owners": _cli(db, "owners", "gpu-0"),
            "run-options": _cli(db, "run-options", pod, container),
        },
    }


@pytest.mark.parametrize(("way", "bulk"), WAYS)
def test_restored_null_reads_as_an_empty_response_everywhere(
    tmp_path: Path, way: Way, bulk: bool
) -> None:
    outputs: dict[str, dict[str, Any]] = {}
    for name, resp in (("null", None), ("empty", b"")):
        db = tmp_path / f"{name}.db"
        with PodStore.open(db) as store:
            way(store, _entries(resp, bulk), tmp_path)
            outputs[name] = _every_output(store, db)

    null, empty = outputs["null"], outputs["empty"]
    # The kubelet facts, stated directly ...
    listed = {e.pod_uid: e for e in null["to_checkpoint_data"]}
    assert listed[NULL_ENTRY.pod_uid].alloc_resp == b""
    assert [e.alloc_resp for e in null["pod_entries"]] == [b""]
    assert null["devices"][RES] >= {"gpu-0", "gpu-1", "gpu-2"}  # allocResp is not nil
    assert null["run_options"] is not None and null["run_options"] == empty["run_options"]
    # ... and then every output of the two stores side by side.
    for key in null:
        assert null[key] == empty[key], key


@pytest.mark.parametrize(("way", "bulk"), WAYS)
def test_export_alone_writes_the_null_back(tmp_path: Path, way: Way, bulk: bool) -> None:
    files: dict[str, bytes] = {}
    for name, resp in (("null", None), ("empty", b"")):
        with PodStore.open(tmp_path / f"{name}.db") as store:
            way(store, _entries(resp, bulk), tmp_path)
            store.export_checkpoint(tmp_path / f"{name}.out")
        files[name] = (tmp_path / f"{name}.out").read_bytes()
    by_pod = {
        name: {e.pod_uid: e for e in read_checkpoint_bytes(tmp_path, data)}
        for name, data in files.items()
    }
    assert by_pod["null"][NULL_ENTRY.pod_uid].alloc_resp is None  # "AllocResp":null
    assert by_pod["empty"][NULL_ENTRY.pod_uid].alloc_resp == b""  # "AllocResp":""
    assert b'"AllocResp":null' in files["null"]
    assert b'"AllocResp":null' not in files["empty"]
    # That is the only difference.
    for e in by_pod["null"].values():
        if e.pod_uid == NULL_ENTRY.pod_uid:
            e.alloc_resp = b""
    assert by_pod["null"] == by_pod["empty"]


def read_checkpoint_bytes(tmp: Path, data: bytes) -> list[PodDevicesEntry]:
    path = tmp / "read-back"
    path.write_bytes(data)
    return list(read_checkpoint(path).entries)


def test_import_then_export_is_byte_identical_and_the_null_survives_a_second_trip(
    tmp_path: Path,
) -> None:
    original = dumps_checkpoint(_entries(None, bulk=True), {RES: ["gpu-0"]})
    (tmp_path / "in").write_bytes(original)
    with PodStore.open(tmp_path / "a.db") as a:
        a.import_checkpoint(tmp_path / "in")
        assert {e.pod_uid: e.alloc_resp for e in a.to_checkpoint_data()}["p-null"] == b""
        a.export_checkpoint(tmp_path / "a.out")
    assert (tmp_path / "a.out").read_bytes() == original
    with PodStore.open(tmp_path / "b.db") as b:
        b.import_checkpoint(tmp_path / "a.out")
        b.export_checkpoint(tmp_path / "b.out")
        # toCheckpointData handed back to a restore is "" now, as in kubelet
        with PodStore.open(tmp_path / "c.db") as c:
            c.from_checkpoint_data(b.to_checkpoint_data())
            c.export_checkpoint(tmp_path / "c.out")
    assert (tmp_path / "b.out").read_bytes() == original
    assert b'"AllocResp":null' not in (tmp_path / "c.out").read_bytes()


def test_the_flag_is_the_only_stored_difference(tmp_path: Path) -> None:
    """The two stores' allocation rows differ only in alloc_resp_json_null."""
    got: dict[str, list[tuple[Any, ...]]] = {}
    for name, resp in (("null", None), ("empty", b"")):
        db = tmp_path / f"{name}.db"
        with PodStore.open(db) as store:
            store.from_checkpoint_data(_entries(resp, bulk=False))
        conn = sqlite3.connect(db)
        try:
            got[name] = conn.execute(
                "SELECT id, container_id, resource, device_ids_null, alloc_resp, "
                "alloc_resp_json_null FROM allocations ORDER BY id"
            ).fetchall()
        finally:
            conn.close()
    flags = {name: [r[5] for r in rows] for name, rows in got.items()}
    assert flags == {"null": [0, 1, 0], "empty": [0, 0, 0]}
    assert [r[:5] for r in got["null"]] == [r[:5] for r in got["empty"]]
    assert got["null"][1][4] == b""
