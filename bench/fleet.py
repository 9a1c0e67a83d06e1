"""The fleet section of ``python -m bench``: many node stores shipped into one PostgreSQL.

1,000 simulated node stores × 100 pods (inserts, replaces, deletes, re-inserts, registered
devices; a few double allocations) are shipped by 4 shipper processes at once into one
throwaway PostgreSQL started the way the tests start it (tests/harness/pgserver.py, here with
fsync on). Measured: events per second ingested, against the same events loaded by 4 parallel
``COPY`` streams into a table with only the primary key (PostgreSQL's own bulk-load path: the
limit of what any shipper could reach); then the latency of the two fleet questions over the
result — ``v_fleet_double_allocations`` and owners-at-time of one device — against the same
question asked of one node store.

Registered as the section ``fleet`` (bench/sections.py): ``python -m bench`` runs it with the
others, ``python -m bench --only fleet`` alone; its figures land in ``latest.json`` and
``latest.md`` with the rest (``--quick``: 100 stores).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import shutil
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.sections import RunContext, Section, register

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_pgserver() -> Any:
    """tests/harness/pgserver.py, loaded from its path: the bench starts its server the way the
    tests do, without putting the test support package on everyone's import path."""
    path = os.path.join(REPO, "tests", "harness", "pgserver.py")
    spec = importlib.util.spec_from_file_location("bench_pgserver", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PgServer = _load_pgserver().PgServer

Log = Callable[[str], None]

TARGET_EVENTS_PER_S = 20_000.0
TARGET_QUERY_S = 0.100


def _build(args: tuple[str, int, int]) -> tuple[int, str]:
    """One node store: ``pods`` pods, then replaces, deletes and re-inserts (its own process)."""
    path, n, pods = args
    from podstore import PodStore

    with sqlite3.connect(path) as raw:  # a copy of the template: give it its own identity
        raw.execute("UPDATE store_meta SET value = ? WHERE key = 'store_id'", (str(uuid.uuid4()),))
    raw.close()
    gpu = "nvidia.com/gpu"
    with PodStore.open(path, durability="normal", verify="off") as store:
        with store.transaction():
            store.set_registered_devices({gpu: [f"GPU-{n}-{i}" for i in range(pods + 20)]})
            for i in range(pods):
                store.insert(f"pod-{n}-{i}", "main", gpu, {i % 2: [f"GPU-{n}-{i}"]}, None)
                if i % 10 == 0:
                    store.insert(f"pod-{n}-{i}", "main", "intel.com/sriov", {0: [f"vf-{i}"]}, b"")
        with store.transaction():
            for i in range(0, pods, 10):  # replaced: moved to a spare GPU
                store.insert(f"pod-{n}-{i}", "main", gpu, {0: [f"GPU-{n}-{pods + i // 10}"]}, None)
            store.delete([f"pod-{n}-{i}" for i in range(5, pods, 20)])
            for i in range(5, pods, 20):
                store.insert(f"pod-{n}-{i}", "main", gpu, {1: [f"GPU-{n}-{i}"]}, None)
            if n % 50 == 0:  # a double allocation on a few nodes
                store.insert(f"rogue-{n}", "main", gpu, {0: [f"GPU-{n}-1"]}, None)
        return n, store.store_id


def _events(path: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT seq, ts, op, pod_uid, container, resource, device_ids "
            "FROM allocation_events ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def _ship_worker(url: str, paths: list[str], start: Any, out: Any) -> None:
    from podstore import PodStore
    from podstore.fleet import db
    from podstore.fleet.ship import ship
    from podstore.fleet.urls import resolve

    db.engine(resolve(url)).connect().close()  # warm: driver loaded, a connection pooled
    # Each simulated node has its store open already (a node agent or `podstore watch` does):
    # the clock measures shipping, not opening 1,000 SQLite files.
    stores = [PodStore.open(path, readonly=True, verify="off") for path in paths]
    start.wait()
    cpu0 = time.process_time()
    events = 0
    for path, store in zip(paths, stores, strict=True):
        events += ship(store, url, node=f"node-{os.path.basename(path)[:-3]}").shipped
    out.put((events, time.process_time() - cpu0))
    for store in stores:
        store.close()


def _copy_worker(url: str, paths: list[str], start: Any, out: Any) -> None:
    import psycopg

    from podstore.fleet.urls import resolve

    libpq = resolve(url).url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as conn:
        loaded = [(str(uuid.uuid4()), _events(p)) for p in paths]  # read before the clock
        start.wait()
        cpu0 = time.process_time()
        events = 0
        for store_id, rows in loaded:
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY copy_events (store_id, seq, ts, op, pod_uid, container, resource, "
                    "device_ids) FROM STDIN"
                ) as copy,
            ):
                for row in rows:
                    copy.write_row((store_id, *row))
            conn.commit()
            events += len(rows)
    out.put((events, time.process_time() - cpu0))


def _server_cpu(server: PgServer) -> float:
    """CPU seconds used so far by the server's processes (postmaster and its children)."""
    with open(server.data / "postmaster.pid", encoding="ascii") as f:
        postmaster = int(f.readline())
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            # utime, stime, and those of reaped children (exited backends)
            total += sum(int(x) for x in fields[11:15]) / tick
    return total


def _parallel(
    target: Any, url: str, paths: list[str], workers: int, server: PgServer
) -> dict[str, float]:
    """Run ``target`` in ``workers`` processes over slices of ``paths``: events, wall seconds
    from the moment all are ready to the moment the last one is done, and the CPU seconds the
    workers and the server used meanwhile."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(url, paths[i::workers], start, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every worker has imported and connected
    server0 = _server_cpu(server)
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=3600) for _ in procs]
    elapsed = time.perf_counter() - t0
    server_cpu = _server_cpu(server) - server0
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a worker failed (exit {p.exitcode})")
    return {
        "events": float(sum(r[0] for r in results)),
        "wall_s": elapsed,
        "client_cpu_s": sum(r[1] for r in results),
        "server_cpu_s": server_cpu,
    }


def _latency(fn: Callable[[], object], reps: int) -> dict[str, float]:
    fn()  # warm
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return {
        "p50_s": statistics.median(samples),
        "p95_s": samples[min(len(samples) - 1, int(len(samples) * 0.95))],
        "min_s": samples[0],
        "reps": reps,
    }


def run(
    workdir: str, log: Log, *, stores: int = 1000, pods: int = 100, shippers: int = 4
) -> dict[str, Any]:
    from sqlalchemy import text

    from podstore import PodStore
    from podstore.fleet import db, migrate
    from podstore.fleet import sql as fleet_sql
    from podstore.fleet.urls import resolve

    root = os.path.join(workdir, "fleet")
    os.makedirs(root, exist_ok=True)
    server = PgServer(fsync=True, prefix="podstore-bench-pg-")
    try:
        server.start()
        url = server.create_database("fleet")
        migrate.init(url)
        log(f"fleet: building {stores} node stores × {pods} pods")
        template = os.path.join(root, "template.db")
        PodStore.open(template).close()
        paths = []
        for n in range(stores):
            path = os.path.join(root, f"{n:04d}.db")
            shutil.copy(template, path)
            paths.append(path)
        t0 = time.perf_counter()
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(2) as pool:
            pool.map(_build, [(p, n, pods) for n, p in enumerate(paths)])
        build_s = time.perf_counter() - t0
        mid = _events(paths[stores // 2])[0][1]  # a node's first event, built half-way
        log(f"fleet: built in {build_s:.0f}s; shipping with {shippers} shippers")

        shipped = _parallel(_ship_worker, url, paths, shippers, server)
        events, ship_s = int(shipped["events"]), shipped["wall_s"]
        target = resolve(url)
        with db.transaction(target) as conn:
            conn.execute(
                text(
                    "CREATE TABLE copy_events (LIKE fleet_events INCLUDING DEFAULTS, "
                    "PRIMARY KEY (store_id, seq))"
                )
            )
        log(f"fleet: shipped {events:,} events in {ship_s:.1f}s; COPY baseline")
        copy = _parallel(_copy_worker, url, paths, shippers, server)
        copied, copy_s = int(copy["events"]), copy["wall_s"]
        with db.connection(target) as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        counts: dict[str, int] = {}
        with db.transaction(target) as conn:
            for name in ("fleet_events", "fleet_allocations", "fleet_entries", "fleet_stores"):
                counts[name] = int(conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one())
            doubles = conn.execute(
                text("SELECT count(*) FROM v_fleet_double_allocations")
            ).scalar_one()
        log("fleet: query latencies")
        probe_n = 10  # a store built before `mid`; its pod 0 moved from GPU-10-0 to a spare
        device = f"GPU-{probe_n}-0"

        with db.connection(target) as conn:

            def double_allocations() -> object:
                with conn.begin():
                    return conn.execute(text("SELECT * FROM v_fleet_double_allocations")).all()

            def owners_at() -> object:
                with conn.begin():
                    return conn.execute(
                        text(fleet_sql.OWNERS_AT), {"device_id": device, "node": None, "at": mid}
                    ).all()

            def owners_now() -> object:
                with conn.begin():
                    return conn.execute(
                        text(fleet_sql.OWNERS_NOW), {"device_id": device, "node": None}
                    ).all()

            q_double = _latency(double_allocations, 30)
            q_owners_at = _latency(owners_at, 100)
            q_owners_now = _latency(owners_now, 100)
            answer_at = owners_at()
        with PodStore.open(paths[probe_n], readonly=True, verify="off") as node:
            n_double = _latency(lambda: node.query("SELECT * FROM v_double_allocations"), 100)
            n_owners_at = _latency(lambda: node.owners_at(device, mid), 100)
            node_answer_at = node.owners_at(device, mid)
        assert [(r[2], r[3], r[4]) for r in answer_at] == node_answer_at  # type: ignore[attr-defined]
        return {
            "stores": stores,
            "pods_per_store": pods,
            "shippers": shippers,
            "build_s": build_s,
            "events": events,
            "ship_s": ship_s,
            "events_per_s": events / ship_s,
            "ship_client_cpu_s": shipped["client_cpu_s"],
            "ship_server_cpu_s": shipped["server_cpu_s"],
            # What 2 idle cores would ingest: events per CPU-second spent on both sides, × 2.
            "ship_events_per_2_cpu_s": 2
            * events
            / (shipped["client_cpu_s"] + shipped["server_cpu_s"]),
            "copy_events_per_2_cpu_s": 2 * copied / (copy["client_cpu_s"] + copy["server_cpu_s"]),
            "load_avg_1m": os.getloadavg()[0],
            "copy_events": copied,
            "copy_s": copy_s,
            "copy_events_per_s": copied / copy_s,
            "rows": counts,
            "double_allocation_rows": int(doubles),
            "queries": {
                "v_fleet_double_allocations": q_double,
                "owners_at_one_device": q_owners_at,
                "owners_now_one_device": q_owners_now,
                "node_v_double_allocations": n_double,
                "node_owners_at": n_owners_at,
            },
            "server": server.psql("SHOW server_version").strip(),
        }
    finally:
        db.dispose_all()
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


def verdicts(res: dict[str, Any]) -> list[tuple[str, float, float, bool, str]]:
    """(target, measured, limit, passed, detail) per target."""
    q = res["queries"]
    ingest = res["events_per_s"]
    return [
        (
            f"ship ≥ {TARGET_EVENTS_PER_S:,.0f} events/s ({res['shippers']} shippers)",
            ingest,
            TARGET_EVENTS_PER_S,
            ingest >= TARGET_EVENTS_PER_S,
            f"{res['events']:,} events in {res['ship_s']:.1f}s; COPY baseline "
            f"{res['copy_events_per_s']:,.0f}/s (ship = {ingest / res['copy_events_per_s']:.0%}); "
            f"CPU {res['ship_client_cpu_s']:.1f}s shippers + {res['ship_server_cpu_s']:.1f}s "
            f"PostgreSQL = {res['ship_events_per_2_cpu_s']:,.0f} events/s on 2 idle cores "
            f"(COPY {res['copy_events_per_2_cpu_s']:,.0f}); load average "
            f"{res['load_avg_1m']:.1f}",
        ),
        *(
            (
                f"{name} p50 < {TARGET_QUERY_S * 1000:.0f} ms",
                q[key]["p50_s"],
                TARGET_QUERY_S,
                q[key]["p50_s"] < TARGET_QUERY_S,
                f"p95 {q[key]['p95_s'] * 1000:.1f} ms over {res['rows']['fleet_allocations']:,} "
                f"allocations, {res['rows']['fleet_events']:,} events; one node: "
                f"{q[node_key]['p50_s'] * 1000:.2f} ms",
            )
            for name, key, node_key in (
                (
                    "v_fleet_double_allocations",
                    "v_fleet_double_allocations",
                    "node_v_double_allocations",
                ),
                ("owners at a time, one device", "owners_at_one_device", "node_owners_at"),
            )
        ),
    ]


def markdown(res: dict[str, Any]) -> str:
    q = res["queries"]
    lines = [
        "## Fleet (PostgreSQL)",
        "",
        f"{res['stores']:,} node stores × {res['pods_per_store']} pods shipped by "
        f"{res['shippers']} parallel shippers into one PostgreSQL {res['server']} "
        "(throwaway server, fsync on).",
        "",
        "| target | measured | limit | verdict | detail |",
        "|---|---|---|---|---|",
    ]
    for name, measured, limit, passed, detail in verdicts(res):
        shown = f"{measured:,.0f}/s" if limit > 1 else f"{measured * 1000:.1f} ms"
        lim = f"{limit:,.0f}/s" if limit > 1 else f"{limit * 1000:.0f} ms"
        lines.append(f"| {name} | {shown} | {lim} | {'PASS' if passed else 'MISS'} | {detail} |")
    lines += ["", "| query | p50 | p95 | min |", "|---|---|---|---|"]
    for name, s in q.items():
        lines.append(
            f"| {name} | {s['p50_s'] * 1000:.2f} ms | {s['p95_s'] * 1000:.2f} ms | "
            f"{s['min_s'] * 1000:.2f} ms |"
        )
    lines += [
        "",
        f"Rows: {', '.join(f'{k} {v:,}' for k, v in res['rows'].items())}; "
        f"{res['double_allocation_rows']} double-allocation rows. "
        f"Stores built in {res['build_s']:.0f} s (not timed).",
        "",
    ]
    return "\n".join(lines)


def _run(ctx: RunContext) -> dict[str, Any]:
    quick = bool(getattr(ctx.cfg, "quick", False))
    # --quick: a tenth of the fleet (the rate and the query latencies, on less data).
    return run(ctx.workdir, ctx.log, stores=100 if quick else 1000)


register(
    Section(
        "fleet",
        "1,000 node stores shipped into one PostgreSQL; fleet query latency",
        run=_run,
        render=lambda res: "\n" + markdown(res),
    )
)
