"""Time the fleet's whole-node views (fleet revision f0003) on a fleet at the bench's scale.

Not a bench section (bench/fleet.py's generated stores hold no CPU items): a throwaway
PostgreSQL (tests/harness/pgserver.py) gets 10,000 generated stores × 1,000 events
(tests/harness/fleetgen.py, as bench/fleet.py), then, per store, an exclusive-CPU item for every
container holding devices (two CPUs, on NUMA node 0 or 1 by the container's rank), a two-node
topology and a name for every pod — rows as the shipping functions leave them in
``fleet_node_items``. Then each query through the reader's path, p50 of 5:

    python scripts/fleet_node_views_scale.py [STORES] [EVENTS_PER_STORE]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import fleetgen
from harness.pgserver import PgServer

from podstore.fleet import admin, migrate, read

ITEMS = """
INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource, value, seq)
SELECT store_id, CAST(jsonb_build_array(pod_uid, container, 'cpu') AS text), 'cpu', pod_uid,
       container, 'cpu',
       jsonb_build_array((r % 32) * 2, (r % 32) * 2 + 1), 1
FROM (SELECT store_id, pod_uid, container,
             row_number() OVER (PARTITION BY store_id ORDER BY pod_uid, container) AS r
      FROM (SELECT DISTINCT store_id, pod_uid, container FROM fleet_allocations) k) c;
INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource, value, seq)
SELECT s.store_id, CAST(jsonb_build_array(NULL, NULL, 'numa:' || n) AS text), 'node', NULL,
       NULL, 'numa:' || n,
       (SELECT jsonb_agg(c) FROM generate_series(n * 32, n * 32 + 31) c), 1
FROM fleet_stores s CROSS JOIN generate_series(0, 1) n;
INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource, value, seq)
SELECT store_id, CAST(jsonb_build_array(pod_uid, NULL, 'pod-name') AS text), 'node', pod_uid,
       NULL, 'pod-name', jsonb_build_object('namespace', 'default', 'name', 'pod-' || pod_uid), 1
FROM (SELECT DISTINCT store_id, pod_uid FROM fleet_allocations) p
-- the generator names its pods already: the others (the double allocations' pods) named here
ON CONFLICT (store_id, item_key) DO NOTHING;
ANALYZE fleet_node_items;
"""

QUERIES = {
    "v_fleet_numa_misaligned, whole fleet (count)": "SELECT count(*) FROM v_fleet_numa_misaligned",
    "v_fleet_numa_misaligned, one node": (
        "SELECT * FROM v_fleet_numa_misaligned WHERE node = 'gen-03333'"
    ),
    "v_fleet_container_numa, one node": (
        "SELECT * FROM v_fleet_container_numa WHERE node = 'gen-03333'"
    ),
    "v_fleet_pod_names, one node": "SELECT * FROM v_fleet_pod_names WHERE node = 'gen-03333'",
    "v_fleet_device_owners with names, one device": (
        "SELECT * FROM v_fleet_device_owners WHERE device_id = 'GPU-3333-7'"
    ),
}


def main() -> None:
    stores = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    server = PgServer(fsync=True, prefix="podstore-scale-pg-")
    try:
        server.start()
        url = server.create_database("fleet")
        migrate.init(url)
        admin.grant_reader(url, "podstore_reader")
        gen = fleetgen.load(url, stores, events, log=print)
        t0 = time.perf_counter()
        server.psql(ITEMS, "fleet")
        print(f"node items written in {time.perf_counter() - t0:.0f}s")
        for what in ("fleet_node_items", "fleet_allocations"):
            print(what, server.psql(f"SELECT count(*) FROM {what}", "fleet"), "rows")
        node = next(s for s in gen.stores if s.n == stores // 3)
        # A device the probe node holds now (its holders: every pod holding it).
        (_resource, held), holders = min(node.holders().items())
        print(
            f"probe node {node.node}, device {held} ({len(holders)} holder(s)): "
            f"{gen.events:,} events in {stores:,} stores"
        )
        for name, sql in QUERIES.items():
            sql = sql.replace("gen-03333", node.node).replace("GPU-3333-7", held)
            times, rows = [], 0
            for _ in range(5):
                t0 = time.perf_counter()
                result = read.query(url, sql)
                times.append(time.perf_counter() - t0)
                rows = len(result.rows)
            print(
                f"{name}: p50 {statistics.median(times) * 1e3:.1f} ms "
                f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}), {rows} rows"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
