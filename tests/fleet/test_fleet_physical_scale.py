"""Node scale for the fleet's physical views (revision f0008): the 1,000-pod node of
tests/test_physical_scale.py (20,000 entries, 1,000 DRA claims, 14,000 CDI devices) shipped
through the command, then a ship with nothing new (the facts compared, nothing written), and
full reads of the views beside a full read of ``v_fleet_allocations`` (printed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness import scale_store as ss
from harness.fleetlib import rows
from test_physical_scale import big  # noqa: F401  (the node, built once for this module)

from podstore import PodStore

VIEWS = (
    "v_fleet_allocations",
    "v_fleet_device_identity",
    "v_fleet_physical_devices",
    "v_fleet_physical_double_allocations",
    "v_fleet_allocation_intervals",
)


def _read_s(url: str, view: str) -> float:
    start = time.perf_counter()
    rows(url, f"SELECT count(*) FROM (SELECT * FROM {view}) x")
    return time.perf_counter() - start


def test_a_1000_pod_node_ships_its_facts_and_the_views_read_it(
    big: Path,  # noqa: F811
    fleet_url: str,
) -> None:
    argv = ss.podstore_argv("--db", str(big), "ship", "--to", fleet_url, "--node", "node-1")
    first = ss.measure(argv)
    assert first.code == 0, first.stderr
    again = ss.measure(argv)
    assert again.code == 0, again.stderr
    with PodStore.open(big, readonly=True) as store:
        sid = store.store_id
        node = {
            view: sorted(tuple(r) for r in store.query(
                f"SELECT mechanism, count(*), max(pod_count) FROM {view} GROUP BY mechanism"
            ).rows)
            for view in ("v_physical_double_allocations",)
        }  # fmt: skip
        held = store.query("SELECT count(*), sum(share) FROM v_physical_devices").rows[0]
        facts = store.query("SELECT count(*) FROM cdi_device_nodes").rows[0][0]
    fleet = sorted(
        rows(
            fleet_url,
            "SELECT mechanism, count(*), max(pod_count) FROM v_fleet_physical_double_allocations "
            "GROUP BY mechanism",
        )
    )
    assert (
        fleet
        == node["v_physical_double_allocations"]
        == [
            ("device-plugin", 10, 2),
            ("dra", 10, 2),
        ]
    )
    ((count, shares),) = rows(
        fleet_url, "SELECT count(*), sum(share) FROM v_fleet_physical_devices"
    )
    assert count == held[0] and abs(shares - held[1]) < 1e-6
    assert rows(
        fleet_url,
        "SELECT count(*) FROM fleet_cdi_device_nodes WHERE store_id = CAST(:s AS uuid)",
        {"s": sid},
    ) == [(facts,)]
    # `fleet usage` through the command: the first catches the node's whole history up into
    # the kept intervals, the second has nothing to take in; the kept rows are the view's.
    usage = ss.podstore_argv(
        "fleet", "usage", "--url", fleet_url, "--by", "namespace", "--since",
        "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z", "-o", "json",
    )  # fmt: skip
    caught = ss.measure(usage)
    assert caught.code == 0, caught.stderr
    quiet = ss.measure(usage)
    assert quiet.code == 0, quiet.stderr
    same = (
        'store_id, mechanism, resource, device, pod_uid, container, start, "end", end_source, '
        "namespace, pod_name, share"
    )
    kept = rows(fleet_url, f"SELECT {same} FROM fleet_intervals")
    assert len(kept) > 20_000
    assert sorted(map(str, kept)) == sorted(
        map(str, rows(fleet_url, f"SELECT {same} FROM v_fleet_allocation_intervals"))
    )
    reads = {view: min(_read_s(fleet_url, view) for _ in range(2)) for view in VIEWS}
    load = os.getloadavg()[0]
    print(
        f"\nfleet, one 1,000-pod node ({facts:,} CDI rows), load {load:.2f}:"
        f"\n  first ship (events and facts): {first.cpu_s:.2f} s CPU, {first.wall_s:.2f} s wall,"
        f" {first.peak_rss_kib / 1024:.0f} MiB peak RSS"
        f"\n  ship with nothing new (facts compared): {again.cpu_s:.2f} s CPU,"
        f" {again.wall_s:.2f} s wall, {again.peak_rss_kib / 1024:.0f} MiB peak RSS"
    )
    print(
        f"  fleet usage --by namespace, catching up {len(kept):,} intervals: "
        f"{caught.wall_s:.2f} s wall ({caught.cpu_s:.2f} s CPU in the command, "
        f"{caught.peak_rss_kib / 1024:.0f} MiB peak RSS); again, nothing to take in: "
        f"{quiet.wall_s:.2f} s wall"
    )
    for view, seconds in reads.items():
        print(f"  full read of {view}: {seconds:.2f} s (server and client, wall)")
