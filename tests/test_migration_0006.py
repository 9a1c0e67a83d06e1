"""Revision 0006 (lean entries): up and down on filled stores, every answer the same.

A store filled at the head through the public API — responses with envs, mounts, devices,
annotations and CDI devices, replaces that release devices, deletes, merge and non-merge
imports, a sync, registered devices, a prune that left gaps — is taken down to 0005 (the
tables of round 2, rebuilt from the views) and up again (the tables converted to the JSON
column and the device spans). At every step the relations docs/sql.md names
(``response_*``, ``allocation_devices``, ``allocation_event_devices``, the run-option views)
answer row for row the same, and so do ``history(device_id=)``, ``owners_at`` and the
entries; ``podstore verify`` is clean at both revisions' heads. kill -9 during this upgrade is
tests/test_reliability_migrate_kill.py's (every old revision is a starting point).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from podstore import PodDevicesEntry, PodStore, check_store
from podstore.deviceplugin import CDIDevice, ContainerAllocateResponse, DeviceSpec, Mount
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.migrate import run_downgrade, run_upgrade

RES = "example.com/gpu"
#: What docs/sql.md promises, whichever revision stores it.
RELATIONS = (
    "response_envs",
    "response_mounts",
    "response_devices",
    "response_annotations",
    "response_cdi_devices",
    "allocation_devices",
    "allocation_event_devices",
    "v_run_options",
    "v_run_option_conflicts",
    "v_allocations",
    "v_device_owners",
    "v_double_allocations",
)


def _resp(i: int) -> bytes:
    msg = ContainerAllocateResponse(
        envs={f"E{i % 3}": f"v{i}", "SHARED": f"s{i % 2}", "ÜNICODE": "ä😀"},
        annotations={f"a.example.com/{i % 4}": f"x{i}"} if i % 2 else {},
    )
    msg.mounts.extend(
        Mount(container_path=f"/m{j}", host_path=f"/h{i}/{j}", read_only=bool(j % 2))
        for j in range(i % 3)
    )
    msg.devices.extend(
        DeviceSpec(container_path=f"/dev/x{j}", host_path=f"/dev/x{i}", permissions="rw")
        for j in range(i % 2 + 1)
    )
    if i % 5 == 0:
        msg.cdi_devices.extend([CDIDevice(name=f"v.com/c={i}"), CDIDevice(name="v.com/c=all")])
    return msg.SerializeToString(deterministic=True)


def _fill(path: Path, tmp: Path) -> datetime:
    """Every writer, with responses of every kind; returns an instant inside the history."""
    from podstore.checkpoint import dumps_checkpoint

    with PodStore.open(path) as store:
        store.insert("first", "c", RES, {0: ["F"]}, _resp(0))
        for i in range(40):
            store.insert(f"pod-{i}", "c", RES, {0: [f"g{i}", f"h{i}"]}, _resp(i))
        store.insert("pod-39", "c", RES, {0: ["h39"], 1: []}, _resp(7))  # releases g39
        store.insert("pod-38", "side", "other", None, None)
        store.insert("pod-37", "side", "other", {0: None, 1: []}, b"")
        store.delete([f"pod-{i}" for i in range(10, 15)])
        cut = datetime.now(UTC) + timedelta(microseconds=1)
        for i in range(0, 40, 2):  # releases g{i}, lists h{i} again
            store.insert(f"pod-{i}", "c", RES, {0: [f"h{i}", f"x{i}"]}, _resp(i + 1))
        store.from_checkpoint_data(
            [
                PodDevicesEntry(f"pod-{i}", "c", RES, {1: [f"y{i}"]}, _resp(i + 2))
                for i in range(30, 39)
            ]
        )
        store.from_checkpoint_data(
            [PodDevicesEntry(f"bulk-{i}", "c", RES, {0: [f"b{i}"]}, _resp(i)) for i in range(70)]
        )
        store.from_checkpoint_data(
            [PodDevicesEntry(f"bulk-{i}", "c", RES, {0: [f"c{i}"]}, b"") for i in range(70)]
        )
        cp = tmp / "cp"
        cp.write_bytes(
            dumps_checkpoint(
                [PodDevicesEntry(f"pod-{i}", "c", RES, {0: ["s"]}, _resp(i)) for i in range(5)],
                {RES: ["s"]},
            )
        )
        store.import_checkpoint(cp, merge=True)
        store.set_registered_devices({RES: ["a", "b"], "other": None})
        store.delete([f"pod-{i}" for i in range(15, 20)])
        assert store.prune_history(cut) > 0
        middle = datetime.now(UTC)
        store.insert("pod-21", "c", RES, {0: ["g21", "z"]}, _resp(3))
        store.insert("late", "c", RES, {0: ["h22"]}, None)
        cp.write_bytes(
            dumps_checkpoint(
                [
                    PodDevicesEntry(f"pod-{i}", "c", RES, {0: [f"h{i}", "n"]}, _resp(i + 9))
                    for i in range(20, 30)
                ]
                + [PodDevicesEntry("late", "c", RES, {0: ["h22"]}, b"")],
                {RES: ["n"]},
            )
        )
        store.import_checkpoint(cp)  # non-merge: drops the others, rewrites the ones it lists
        store.insert("after-import", "c", RES, {0: ["h23"]}, _resp(4))
        store.insert("after-import", "c", "other", {0: ["o1"]}, _resp(5))  # SHARED conflicts
    assert check_store(path) == []
    return middle


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, datetime]:
    tmp = tmp_path_factory.mktemp("m0006")
    path = tmp / "filled.db"
    return path, _fill(path, tmp)


def _answers(path: Path, middle: datetime, *, api: bool = True) -> dict[str, Any]:
    """Every relation of the contract, as sorted rows, the events naming each device (the
    query docs/sql.md gives), and with ``api`` (the store at the head) the history reads."""
    conn = sqlite3.connect(path)
    try:
        out: dict[str, Any] = {
            name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
            for name in RELATIONS
        }
        devices = [
            r[0] for r in conn.execute("SELECT DISTINCT device_id FROM allocation_event_devices")
        ]
        for device in devices:
            out[f"events {device}"] = conn.execute(
                "SELECT e.seq, e.op, e.pod_uid, d.released FROM allocation_events e "
                "JOIN allocation_event_devices d ON d.seq = e.seq WHERE d.device_id = ? "
                "ORDER BY e.seq",
                (device,),
            ).fetchall()
    finally:
        conn.close()
    assert len(devices) > 100
    if not api:
        return out
    with PodStore.open(path, readonly=True) as store:
        out["entries"] = store.to_checkpoint_data()
        out["registered"] = store.registered_devices()
        for device in devices:
            out[f"history {device}"] = [
                (e.seq, e.op, e.pod_uid, e.released) for e in store.history(device_id=device)
            ]
            for label, when in (("middle", middle), ("end", datetime.now(UTC))):
                out[f"owners_at {device} {label}"] = store.owners_at(device, when)
        out["history since"] = [e.seq for e in store.history(since=middle)]
        out["history until"] = [e.seq for e in store.history(until=middle)]
        out["verify"] = store.verify_history().ok
    return out


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def test_down_and_up_answer_the_same(filled: tuple[Path, datetime], tmp_path: Path) -> None:
    source, middle = filled
    db = tmp_path / "copy.db"
    db.write_bytes(source.read_bytes())
    head = _answers(db, middle)
    assert head["verify"] and head["response_mounts"] and head["response_cdi_devices"]
    assert head["response_annotations"] and head["v_run_option_conflicts"]
    assert any(r[2] for r in head["allocation_event_devices"]), "no released device"

    run_downgrade(ConnectOptions(path=str(db)), "0005")
    tables = _tables(db)
    assert {"response_envs", "allocation_devices", "allocation_event_devices"} <= tables
    assert not {"allocation_device_spans", "event_device_rows"} & tables
    down = _answers(db, middle, api=False)
    assert down == _answers(source, middle, api=False)

    run_upgrade(ConnectOptions(path=str(db)), "head")
    tables = _tables(db)
    assert {"allocation_device_spans", "event_device_rows"} <= tables
    assert not {"response_envs", "allocation_devices", "allocation_event_devices"} & tables
    assert check_store(db) == []
    up = _answers(db, middle)
    assert up == head

    # The converted store keeps working: writes over converted entries, verify, prune.
    with PodStore.open(db, upgrade=False) as store:
        store.insert("pod-21", "c", RES, {0: ["z"]}, _resp(5))  # releases h21 and n
        store.delete(["pod-22"])
        shown = [(e.op, e.pod_uid, e.released) for e in store.history(device_id="h21")]
        assert shown[-2:] == [("import", "pod-21", []), ("replace", "pod-21", ["h21", "n"])]
        assert store.owners_at("h21", datetime.now(UTC)) == []
        assert ("pod-22", "c", RES) not in store.owners_at("n", datetime.now(UTC))
        assert ("pod-23", "c", RES) in store.owners_at("n", datetime.now(UTC))
        assert store.verify_history().ok
        assert store.prune_history(datetime.now(UTC)) > 0
    assert check_store(db) == []


def test_down_to_0005_gives_the_0005_tables_back_row_for_row(
    filled: tuple[Path, datetime], tmp_path: Path
) -> None:
    """0005 → 0006 → 0005 leaves every 0005 table as it was (the ts index back as well)."""
    from harness.refmodel import table_dump

    source, _middle = filled
    db = tmp_path / "copy.db"
    db.write_bytes(source.read_bytes())
    run_downgrade(ConnectOptions(path=str(db)), "0005")
    before = table_dump(db)
    schema_before = _schema(db)
    run_upgrade(ConnectOptions(path=str(db)), "0006")
    run_downgrade(ConnectOptions(path=str(db)), "0005")
    assert table_dump(db) == before
    assert _schema(db) == schema_before


def _schema(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return sorted(
            (str(r[0]), " ".join(str(r[1]).split()))
            for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        )
    finally:
        conn.close()


def test_the_frozen_json_is_the_one_the_writers_write() -> None:
    """Revision 0006 converts rows with its own copy of responses.to_json: the same text."""
    import importlib.util

    from podstore.pure import alloc_resp
    from podstore.storage import responses

    here = Path(__file__).resolve().parent.parent / "migrations" / "versions"
    spec = importlib.util.spec_from_file_location("m0006", here / "0006_lean_entries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for i in range(12):
        parsed = alloc_resp.parse(_resp(i))
        assert not isinstance(parsed, str)
        sections = {
            "envs": list(parsed.envs),
            "mounts": list(parsed.mounts),
            "devices": list(parsed.devices),
            "annotations": list(parsed.annotations),
            "cdi_devices": [(n,) for n in parsed.cdi_devices],
        }
        assert module._to_json(sections) == responses.to_json(parsed)
