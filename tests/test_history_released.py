"""An event that changes an existing entry's devices names the devices it released (issue 23,
item 9): through the API, every writer, and ``podstore history`` in every output format.

insert p1 {G1} → replace p1 {G2} → insert p2 {G1} used to read as two holders of G1;
``history(device_id="G1")`` now shows the replace releasing G1, and ``owners_at`` is unchanged.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint
from podstore.cli import main
from podstore.storage import events

RES = "example.com/gpu"
START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """Each write a minute after the last."""
    now = [START]

    def tick() -> datetime:
        now[0] += timedelta(minutes=1)
        return now[0]

    monkeypatch.setattr(events, "utcnow", tick)
    return now


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, _ = capsys.readouterr()
    return int(exc.value.code or 0), out


def test_the_issue_sequence(store: PodStore, clock: list[datetime]) -> None:
    store.insert("p1", "c", RES, {0: ["G1"]}, None)  # 10:01
    store.insert("p1", "c", RES, {0: ["G2"]}, None)  # 10:02: releases G1
    store.insert("p2", "c", RES, {0: ["G1"]}, None)  # 10:03
    shown = [(e.seq, e.op, e.pod_uid, e.devices, e.released) for e in store.history(device_id="G1")]
    assert shown == [
        (1, "insert", "p1", {"G1"}, []),
        (2, "replace", "p1", {"G2"}, ["G1"]),
        (3, "insert", "p2", {"G1"}, []),
    ]
    assert [e.seq for e in store.history(device_id="G2")] == [2]
    assert store.owners_at("G1", "2026-12-01T10:01:30Z") == [("p1", "c", RES)]
    assert store.owners_at("G1", "2026-12-01T10:02:30Z") == []
    assert store.owners_at("G1", "2026-12-01T10:03:30Z") == [("p2", "c", RES)]
    assert store.owners_at("G2", "2026-12-01T10:03:30Z") == [("p1", "c", RES)]
    with store.reader() as reader:
        assert [e.released for e in reader.history(device_id="G1")] == [[], ["G1"], []]


def test_only_what_the_entry_gives_up_in_code_point_order(store: PodStore) -> None:
    store.insert("p", "c", RES, {0: ["b", "é", "Z"], 1: ["a", "keep"]}, None)
    store.insert("p", "c", RES, {-1: ["keep", "new"], 0: ["a"]}, None)  # a moved NUMA: kept
    [ev] = store.history(device_id="é")[1:]
    assert ev.released == ["Z", "b", "é"]
    store.insert("p", "c", RES, None, None)  # a null map gives up everything
    assert store.history()[-1].released == ["a", "keep", "new"]
    store.insert("p", "c", RES, {0: ["x"]}, None)  # from a null map: nothing to give up
    assert store.history()[-1].released == []
    store.delete(["p"])  # a delete names what it had in device_ids, not in released
    last = store.history()[-1]
    assert (last.op, last.devices, last.released) == ("delete", {"x"}, [])


def test_every_writer_over_an_existing_entry_records_the_release(
    store: PodStore, tmp_path: Path
) -> None:
    store.insert("small", "c", RES, {0: ["s1"]}, None)
    store.from_checkpoint_data([PodDevicesEntry("small", "c", RES, {0: ["s2"]}, b"")])
    assert store.history()[-1].released == ["s1"]
    bulk = [PodDevicesEntry(f"b{i}", "c", RES, {0: [f"old{i}"]}, b"") for i in range(70)]
    store.from_checkpoint_data(bulk)  # new: nothing released
    assert all(e.released == [] for e in store.history()[-70:])
    store.from_checkpoint_data(  # the bulk writer over existing entries
        [PodDevicesEntry(f"b{i}", "c", RES, {0: [f"new{i}"]}, b"") for i in range(70)]
    )
    assert [e.released for e in store.history()[-70:]] == [[f"old{i}"] for i in range(70)]
    cp = tmp_path / "cp"
    cp.write_bytes(dumps_checkpoint([PodDevicesEntry("small", "c", RES, {0: ["s3"]}, b"")], {}))
    store.import_checkpoint(cp, merge=True)
    assert (store.history()[-1].op, store.history()[-1].released) == ("import", ["s2"])
    cp.write_bytes(dumps_checkpoint([PodDevicesEntry("small", "c", RES, {0: ["s4"]}, b"")], {}))
    report = store.sync_checkpoint(cp)
    assert report.replaced == 1
    replaced = [e for e in store.history() if e.op == "replace"]
    assert replaced[-1].released == ["s3"]
    assert store.owners_at("s3", datetime.now(UTC) + timedelta(days=1)) == []
    assert store.owners_at("s4", datetime.now(UTC) + timedelta(days=1)) == [("small", "c", RES)]


@pytest.mark.parametrize("fmt", ["table", "json", "yaml", "csv"])
def test_the_command_shows_a_released_column(
    db_path: Path, clock: list[datetime], capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    with PodStore.open(db_path) as store:
        store.insert("p1", "c", RES, {0: ["G1", "G0"]}, None)
        store.insert("p1", "c", RES, {0: ["G2"]}, None)
        store.insert("p2", "c", RES, {0: ["G1"]}, None)
    code, out = run(capsys, "--db", str(db_path), "history", "--device", "G1", "-o", fmt)
    assert code == 0
    if fmt == "json":
        rows = json.loads(out)
        assert [r["released"] for r in rows] == [[], ["G0", "G1"], []]
        # after device_ids; the whole node's columns (manager, namespace, name) follow it
        assert list(rows[0])[6:9] == ["device_ids", "released", "manager"]
    elif fmt == "yaml":
        assert [r["released"] for r in yaml.safe_load(out)] == [[], ["G0", "G1"], []]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [r["released"] for r in rows] == ["", "G0,G1", ""]
    else:
        lines = out.splitlines()
        assert lines[0].split()[6:9] == ["DEVICE_IDS", "RELEASED", "MANAGER"]
        cells = lines[2].split()
        assert cells[2] == "replace" and cells[-2:] == ["G0,G1", "devices"]
        assert len(lines) == 4
