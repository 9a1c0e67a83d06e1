"""Node scale: stores of 20,000+ entries in total shipped, checked, and asked the fleet
questions; times against the matching API calls and peak memory are recorded (the speed
targets are the benchmark's: python -m bench, docs/fleet.md)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness.fleetlib import assert_same_state, fleet_event_seqs, node_events

from podstore import PodDevicesEntry, PodStore
from podstore.fleet import read
from podstore.fleet.ship import ship

STORES = 4
ENTRIES_PER_STORE = 5_200  # 20,800 in all


@pytest.fixture(scope="session")
def big_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    root = tmp_path_factory.mktemp("fleet-scale")
    paths = []
    for n in range(STORES):
        path = root / f"node-{n}.db"
        with PodStore.open(path, durability="normal") as store:
            entries = [
                PodDevicesEntry(
                    f"pod-{n}-{i // 2}",
                    "main" if i % 2 else "init",
                    "nvidia.com/gpu",
                    {i % 2: [f"GPU-{n}-{i % 997}"]},
                    b"",
                )
                for i in range(ENTRIES_PER_STORE)
            ]
            store.from_checkpoint_data(entries)  # one bulk write: 'import' events
            with store.transaction():
                for i in range(0, 400, 2):
                    store.insert(f"pod-{n}-{i}", "main", "nvidia.com/gpu", {1: [f"X-{i}"]}, None)
                store.delete([f"pod-{n}-{i}" for i in range(1, 400, 4)])
            store.set_registered_devices({"nvidia.com/gpu": [f"GPU-{n}-{i}" for i in range(997)]})
        paths.append(path)
    yield paths


def test_ship_and_ask_at_scale(
    big_nodes: list[Path], fleet_url: str, record_property: Callable[[str, object], None]
) -> None:
    stores = [PodStore.open(p, readonly=True) for p in big_nodes]
    try:
        assert sum(s.stats().allocations for s in stores) >= 20_000
        tracemalloc.start()
        t0 = time.perf_counter()
        for i, store in enumerate(stores[:-1]):
            ship(store, fleet_url, node=f"node-{i}")
        api_s = time.perf_counter() - t0
        api_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # The last one through the command, for its time and peak memory.
        t0 = time.perf_counter()
        code = (
            "import resource, sys\n"
            "from podstore.cli import main\n"
            "try:\n"
            f"    main(['--db', {str(big_nodes[-1])!r}, 'ship', '--to', {fleet_url!r},"
            f" '--node', 'node-{STORES - 1}'])\n"
            "finally:\n"
            "    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "    print('RSS', rss, file=sys.stderr)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        cli_s = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr
        cli_rss_kb = int(proc.stderr.split("RSS")[-1])
        for store in stores:
            assert_same_state(fleet_url, store)
            assert fleet_event_seqs(fleet_url, store.store_id) == [e[0] for e in node_events(store)]

        t0 = time.perf_counter()
        doubles = read.query(fleet_url, "SELECT * FROM v_fleet_double_allocations").rows
        doubles_s = time.perf_counter() - t0
        node_doubles = sum(len(s.query("SELECT * FROM v_double_allocations").rows) for s in stores)
        assert len(doubles) == node_doubles > 0
        t0 = time.perf_counter()
        owners = read.owners(fleet_url, "GPU-2-5").rows
        owners_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        node_owners = (
            stores[2]
            .query(
                "SELECT pod_uid, container, resource FROM v_device_owners WHERE device_id = ?",
                ("GPU-2-5",),
            )
            .rows
        )
        node_owners_s = time.perf_counter() - t0
        assert sorted((r[2], r[3], r[4]) for r in owners) == sorted(node_owners)
        now = node_events(stores[2])[-1]
        t0 = time.perf_counter()
        past = read.owners(fleet_url, "GPU-2-5", at="2100-01-01T00:00:00Z").rows
        owners_at_s = time.perf_counter() - t0
        assert sorted((r[2], r[3], r[4]) for r in past) == stores[2].owners_at(
            "GPU-2-5", "2100-01-01T00:00:00Z"
        )
        assert now
        figures = {
            "ship_api_s_3_stores": round(api_s, 3),
            "ship_api_peak_traced_mb": round(api_peak / 1e6, 1),
            "ship_cli_s_1_store": round(cli_s, 3),
            "ship_cli_peak_rss_mb": round(cli_rss_kb / 1024, 1),
            "fleet_double_allocations_s": round(doubles_s, 4),
            "fleet_owners_now_s": round(owners_s, 4),
            "node_owners_now_s": round(node_owners_s, 4),
            "fleet_owners_at_s": round(owners_at_s, 4),
            "peak_rss_of_this_process_mb": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
            ),
        }
        for name, value in figures.items():
            record_property(name, value)
        print(figures)
        # Shipping streams batches: a store of 5,200 entries must not need a large heap.
        assert api_peak < 200e6 and cli_rss_kb < 400 * 1024
    finally:
        for store in stores:
            store.close()
