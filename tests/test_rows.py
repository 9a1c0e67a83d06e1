"""The checkpoint → rows layer (storage/rows.py) under import, sync and from_checkpoint_data:
one NUMA-map expansion, one bulk threshold, the same rows and events whichever writer runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.refmodel import table_dump

from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file
from podstore.storage.rows import BULK_ROWS, device_rows


def test_device_rows_lists_devices_and_marks_empty_and_null_lists() -> None:
    rows, empty = device_rows({0: ["a", "b"], 1: [], 2: None, -1: ["x"]}, 7)
    assert rows == [(7, 0, 0, "a"), (7, 0, 1, "b"), (7, -1, 0, "x")]
    assert empty == [(7, 1, False), (7, 2, True)]
    assert device_rows(None, 7) == ([], []) == device_rows({}, 7)
    # Span rows carry the whole owner (allocation and event); markers only its first part.
    rows, empty = device_rows({0: ["a"], 1: []}, 7, 42)
    assert rows == [(7, 42, 0, 0, "a")] and empty == [(7, 1, False)]


#: The tables of an entry's state (the history and store metadata differ in time and op).
ENTRY_TABLES = ("pods", "containers", "allocations", "allocation_device_spans", "empty_numa_lists")


def _state(store: PodStore) -> tuple[object, ...]:
    tables = table_dump(store.path)
    return (store.to_checkpoint_data(), store.devices(), *(tables[t] for t in ENTRY_TABLES))


def _entries(n: int, tag: str) -> list[PodDevicesEntry]:
    return [
        PodDevicesEntry(f"{tag}-{i}", "c", "example.com/gpu", {0: [f"{tag}{i}"], 1: []}, b"")
        for i in range(n)
    ]


@pytest.mark.parametrize("count", [3, BULK_ROWS, BULK_ROWS + 1, 3 * BULK_ROWS])
def test_one_at_a_time_and_bulk_writes_give_the_same_store(tmp_path: Path, count: int) -> None:
    """Around the one threshold, a sync and from_checkpoint_data write the same entries with
    the same events (insert for a sync, import for a restore), whichever writer runs."""
    cp = tmp_path / "kubelet_internal_checkpoint"
    entries = _entries(count, "p")
    write_checkpoint_file(cp, dumps_checkpoint(entries, None))
    with PodStore.open(tmp_path / "synced.db") as synced:
        report = synced.sync_checkpoint(cp)
        assert report.inserted == count
        assert {e.op for e in synced.history()} == {"insert"}
        synced_state = _state(synced)
        synced_devices = [sorted(e.devices) for e in synced.history()]
    with PodStore.open(tmp_path / "restored.db") as restored:
        restored.from_checkpoint_data(entries)
        assert {e.op for e in restored.history()} == {"import"}
        assert _state(restored) == synced_state
        assert [sorted(e.devices) for e in restored.history()] == synced_devices
    with PodStore.open(tmp_path / "imported.db") as imported:
        imported.import_checkpoint(cp)
        assert _state(imported) == synced_state
