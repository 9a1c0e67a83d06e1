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
from harness.fleetlib import assert_same_state, connect, fleet_event_seqs, node_events, rows

from podstore import PodDevicesEntry, PodStore
from podstore.fleet import read
from podstore.fleet.migrations.versions import f0009_kept_intervals as f0009
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
            "import sys\n"
            "from podstore.cli import main\n"
            "try:\n"
            f"    main(['--db', {str(big_nodes[-1])!r}, 'ship', '--to', {fleet_url!r},"
            f" '--node', 'node-{STORES - 1}'])\n"
            "finally:\n"
            "    with open('/proc/self/status') as f:\n"  # VmHWM: see test_fleet_cli
            "        rss = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
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


def _plan(url: str, sql: str, params: dict[str, object]) -> str:
    """The executed plan's text (EXPLAIN ANALYZE) through podstore's own connections."""
    from sqlalchemy import text

    from podstore.fleet import db
    from podstore.fleet.urls import resolve

    with db.transaction(resolve(url)) as conn:
        return "\n".join(r[0] for r in conn.execute(text("EXPLAIN ANALYZE " + sql), params))


def test_a_generated_fleet_answers_right_with_the_planned_lookups(fleet_url: str) -> None:
    # The benchmark's 10,000 stores / 10,000,000 events at a bounded size: answers checked
    # against the generator's own model, and the plans that keep them fast at scale.
    from harness import fleetgen

    from podstore.fleet import sql as q

    loaded = fleetgen.load(fleet_url, 200, 1000)
    assert loaded.events == 200_000
    checked = read.verify(fleet_url).dicts()
    assert len(checked) == 200
    assert all((r["chained"], r["problem"]) == (1000, None) for r in checked)
    model = {s.store_id: s for s in loaded.stores}
    for row in read.nodes(fleet_url).dicts():
        s = model[str(row["store_id"])]
        assert (row["node"], row["events"], row["entries"], row["device_rows"]) == (
            s.node,
            1000,
            len(s.entries),
            s.device_rows(),
        )
    for n in (3, 77, 150):
        device, at = fleetgen.device(n, 7), fleetgen.ts_of(n, 400 + n)
        got = [(r[2], r[3], r[4]) for r in read.owners(fleet_url, device, at=at).rows]
        assert got == fleetgen.owners_at(n, 1000, device, at)
    doubles = {
        (str(r[0]), r[1])
        for r in read.query(
            fleet_url, "SELECT store_id, device_id FROM v_fleet_double_allocations"
        ).rows
    }
    assert (
        doubles == {(s.store_id, dev) for s in loaded.stores for (_res, dev) in s.doubles()}
        and len(doubles) >= 4
    )
    # Owners at a time finds the device's events through the GIN index, never by a scan of
    # the history; fleet nodes reads the counters, never the history.
    device, at = fleetgen.device(77, 7), fleetgen.ts_of(77, 500)
    plan = _plan(fleet_url, q.OWNERS_AT, {"device_id": device, "node": None, "at": at})
    assert "ix_fleet_events_devices" in plan
    assert "Seq Scan on fleet_events" not in plan
    nodes_plan = _plan(fleet_url, q.NODES, {})
    assert "fleet_events" not in nodes_plan and "fleet_stores" in nodes_plan
    # A month's usage per namespace (the generated history spans a month and a day, names
    # its pods and ends half its deletes early): the model's device-seconds, summed from the
    # intervals the fleet keeps (filled after the load, every store marked caught up), never
    # from the history.
    until = max(fleetgen.ts_of(s.n, s.last_seq) for s in loaded.stores)
    since = fleetgen.ts_of(0, 40)
    want: dict[str | None, float] = {}
    for n in range(200):
        for ns, seconds in fleetgen.usage_by_namespace(n, 1000, since, until).items():
            want[ns] = want.get(ns, 0.0) + seconds
    month = read.usage(fleet_url, by="namespace", since=since, until=until).dicts()
    got = {r["namespace"]: float(r["device_seconds"]) for r in month}
    assert got.keys() == want.keys() and len(want) == fleetgen.NAMESPACES + 1
    assert all(abs(got[ns] - want[ns]) < 1e-9 * want[ns] + 0.01 for ns in want), (got, want)
    usage_plan = _plan(fleet_url, q.usage_sql("namespace", False), {"since": since, "until": until})
    assert "fleet_intervals" in usage_plan and "fleet_events" not in usage_plan
    # A catch-up from marks set back 100 events on 20 stores recomputes what those events
    # name, and leaves the rows the whole history computes.
    behind = [s.store_id for s in loaded.stores[::10]]
    with connect(fleet_url) as conn:
        conn.execute(
            "UPDATE fleet_intervals_marks SET seq = seq - 100 WHERE store_id = ANY(%s)",
            (behind,),
        )
        conn.commit()
    assert read.catch_up(fleet_url) == 20 * 100
    assert read.catch_up(fleet_url) == 0
    kept = sorted(
        tuple(map(str, r)) for r in rows(fleet_url, f"SELECT {f0009.COLUMNS} FROM fleet_intervals")
    )
    computed = sorted(tuple(map(str, r)) for r in rows(fleet_url, f0009.ALL_ROWS))
    assert kept == computed
    # A catch-up's recomputation, planned generically as plpgsql may plan it, reads the named
    # pods' and claims' events and their pod names through their indexes, never a whole table;
    # so do its look-ups of the events past a mark and of a replica's registration in force.
    keyed = (
        f0009.KEYED_ROWS.replace("l_pod_stores", "$1")
        .replace("l_pods", "$2")
        .replace("l_claim_stores", "$3")
        .replace("l_claims", "$4")
    )
    store = loaded.stores[77]
    pods = sorted(store.names)
    share = (
        "WITH ended AS (SELECT $1 AS store_id, 'device-plugin' AS mechanism, $2 AS resource, "
        "$3 AS device, CAST($4 AS timestamptz) AS start),"
        + f0009.SHARE_CTES
        + " SELECT * FROM replica_shares"
    )
    with connect(fleet_url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE keyed(uuid[], text[], uuid[], text[]) AS {keyed}")
        conn.execute(f"PREPARE share(uuid, text, text, text) AS {share}")
        conn.execute(
            "PREPARE past(uuid[], bigint[]) AS SELECT count(*) "
            "FROM unnest($1, $2) AS b (store_id, mark) "
            "JOIN fleet_events e ON e.store_id = b.store_id AND e.seq > b.mark"
        )
        # (the generator's names: plain text, no quoting needed)
        sid = store.store_id
        args = (
            f"'{{{','.join([sid] * len(pods))}}}', '{{{','.join(pods)}}}', "
            f"'{{{sid}}}', '{{dra:none}}'"
        )
        plans = [
            f"EXPLAIN EXECUTE keyed({args})",
            f"EXPLAIN EXECUTE share('{sid}', '{fleetgen.GPU}', 'GPU-1::2', '{until}')",
            f"EXPLAIN EXECUTE past('{{{sid}}}', '{{900}}')",
        ]
        for explain in plans:
            plan = "\n".join(r[0] for r in conn.execute(explain))
            assert "Seq Scan" not in plan, plan


def test_fleet_questions_are_planned_for_their_parameters_every_time(fleet_url: str) -> None:
    # psycopg prepares a statement run five times; PostgreSQL may then use a generic plan,
    # blind to the device asked for (at 10,000,000 events: 390 ms instead of 9 ms). Each call
    # must get a plan of its own.
    from sqlalchemy import text

    from podstore.fleet import db
    from podstore.fleet import sql as q
    from podstore.fleet.urls import resolve

    with db.connection(resolve(fleet_url)) as conn:
        for i in range(12):
            with conn.begin():
                params = {"device_id": f"GPU-{i}", "node": None, "at": "2026-12-01T00:00:00Z"}
                conn.execute(text(q.OWNERS_AT), params).all()
        with conn.begin():
            plans = conn.execute(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%WITH stores AS%'"
                )
            ).all()
    assert plans and all(generic == 0 and custom >= 5 for generic, custom in plans), plans
