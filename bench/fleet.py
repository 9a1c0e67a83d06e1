"""The fleet section of ``python -m bench``: a fleet of 10,000 stores and 10,000,000 events in
one PostgreSQL, asked the fleet questions while 4 shippers ship more on top.

1. **Generated history**: 10,000 stores × 1,000 events, chained as nodes chain them, written
   with COPY together with the state they end in (tests/harness/fleetgen.py; shipping them
   would take most of an hour; 45 minutes apart, so the history spans a month, with pod names
   and runtime ends). Timed: the load, the index builds, and the kept intervals' fill from the
   whole history (what fleet revision f0009's upgrade does).
2. **Ingest on top**: 1,000 real node stores (PodStore, 100 pods each: inserts, replaces,
   deletes, re-inserts, registered devices, a few double allocations) shipped by 4 shipper
   processes through the shipping functions, every hash checked by the server. Measured:
   events per second, and the CPU the shippers and the server spent.
3. **The questions**, each through its API call, quiet and *while the shippers run*: owners of
   one device at an instant (``read.owners(..., at=...)``), double allocations
   (``v_fleet_double_allocations``), ``fleet nodes`` (``read.nodes``). Target: p50 < 100 ms
   under ingest, ingest ≥ 20,000 events/s. And a month's device-seconds per namespace
   (``read.usage(..., by="namespace")``, behind ``podstore fleet usage``) over the month
   before the generated history's newest event, from every allocation interval of every
   store: p50 of a few runs, quiet (caught up: nothing to take in) and while the shippers run
   (in a thread of its own, so the other questions keep their pace), each run's catch-up of
   what was shipped since the last included; the catch-ups' cost per 1,000 events taken in.
   Target: ≤ 2 s (docs/physical-devices contract, "Fleet").
4. ``fleet verify`` over the whole fleet and for one node, and a COPY of the shipped events
   into a bare table with 4 parallel streams: the bulk-load ceiling shipping is compared to.

The server is the tests' throwaway PostgreSQL (tests/harness/pgserver.py) with fsync on and a
fleet server's memory settings (SETTINGS). Registered as the section ``fleet``
(bench/sections.py); ``--quick``: 1,000 stores × 1,000 events, 200 node stores shipped.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.sections import RunContext, Section, load_harness, register

PgServer = load_harness("pgserver").PgServer
fleetgen = load_harness("fleetgen")

Log = Callable[[str], None]

TARGET_EVENTS_PER_S = 20_000.0
TARGET_QUERY_S = 0.100
TARGET_USAGE_S = 2.0
USAGE_REPS = 3
#: The usage window: the month before the generated history's newest event.
MONTH_S = 30 * 86_400

#: A fleet server's memory, not the 128 MB PostgreSQL starts with (ALTER SYSTEM, restart).
SETTINGS = {
    "shared_buffers": "1GB",
    "effective_cache_size": "4GB",
    "work_mem": "32MB",
    "maintenance_work_mem": "512MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
}


def _build(args: tuple[str, int, int]) -> tuple[int, str]:
    """One node store: ``pods`` pods, then replaces, deletes and re-inserts (its own process)."""
    path, n, pods = args
    from podstore import PodStore

    # A copy of the (empty) template: give it its own identity before its first event.
    with sqlite3.connect(path) as raw:
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


def _backend_cpu(pid: int) -> float:
    """CPU seconds one server process has used so far (the server runs on this machine)."""
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0]) / 1e9


def _backend_pid(conn: Any) -> int:
    from sqlalchemy import text

    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _ship_worker(url: str, paths: list[str], start: Any, out: Any) -> None:
    from podstore import PodStore
    from podstore.fleet import db
    from podstore.fleet.ship import ship
    from podstore.fleet.urls import resolve

    # Warm: driver loaded, one connection pooled — the one every ship below checks out again
    # (they run one after the other), whose server process is this shipper's backend.
    with db.engine(resolve(url)).connect() as conn:
        backend = _backend_pid(conn)
    # Each simulated node has its store open already (a node agent or `podstore watch` does):
    # the clock measures shipping, not opening 1,000 SQLite files.
    stores = [PodStore.open(path, readonly=True, verify="off") for path in paths]
    start.wait()
    cpu0 = time.process_time()
    server0 = _backend_cpu(backend)
    events = 0
    for path, store in zip(paths, stores, strict=True):
        events += ship(store, url, node=f"node-{os.path.basename(path)[:-3]}").shipped
    server = _backend_cpu(backend) - server0
    with db.engine(resolve(url)).connect() as conn:
        if _backend_pid(conn) != backend:
            server = float("nan")  # another connection shipped: not measured
    out.put((events, time.process_time() - cpu0, server))
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
    out.put((events, time.process_time() - cpu0, float("nan")))


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
    target: Any,
    url: str,
    paths: list[str],
    workers: int,
    server: PgServer,
    meanwhile: Callable[[threading.Event], None] | None = None,
) -> dict[str, float]:
    """Run ``target`` in ``workers`` processes over slices of ``paths``: events, wall seconds
    from the moment all are ready to the moment the last one is done, and the CPU seconds the
    workers and the server used meanwhile. ``meanwhile(done)`` runs in this process while they
    work (until ``done`` is set)."""
    # Spawned, not forked: a fresh interpreter holds no SQLite connection of this process
    # (a forked child that inherits one may not use that file: docs/api.md, "Threads,
    # processes and fork"). Each worker waits at the barrier once it has imported, connected
    # and opened its stores; the clock starts when the last one (and this process) is there.
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(url, paths[i::workers], start, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    done = threading.Event()
    side = threading.Thread(target=meanwhile, args=(done,)) if meanwhile else None
    server0 = _server_cpu(server)
    start.wait(timeout=600)
    t0 = time.perf_counter()
    if side is not None:
        side.start()
    results = [out.get(timeout=3600) for _ in procs]
    elapsed = time.perf_counter() - t0
    done.set()
    if side is not None:
        side.join()
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
        # The workers' own server processes (NaN where not measured).
        "backend_cpu_s": sum(r[2] for r in results),
    }


def _summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50_s": statistics.median(samples),
        "p95_s": samples[min(len(samples) - 1, int(len(samples) * 0.95))],
        "min_s": samples[0],
        "reps": len(samples),
    }


def _latency(fn: Callable[[], object], reps: int) -> dict[str, float]:
    fn()  # warm
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return _summary(samples)


def _configure(server: PgServer) -> None:
    for name, value in SETTINGS.items():
        server.psql(f"ALTER SYSTEM SET {name} = '{value}'")
    server.stop()
    server.start()


def run(
    workdir: str,
    log: Log,
    *,
    stores: int = 10_000,
    events_per_store: int = 1_000,
    ship_stores: int = 1_000,
    pods: int = 100,
    shippers: int = 4,
) -> dict[str, Any]:
    from sqlalchemy import text

    from podstore import PodStore
    from podstore.fleet import admin, db, migrate, read
    from podstore.fleet.urls import resolve

    root = os.path.join(workdir, "fleet")
    os.makedirs(root, exist_ok=True)
    server = PgServer(fsync=True, prefix="podstore-bench-pg-")
    try:
        server.start()
        _configure(server)
        url = server.create_database("fleet")
        migrate.init(url)
        admin.grant_reader(url, "podstore_reader")
        target = resolve(url)

        log(f"fleet: generating {stores:,} stores × {events_per_store:,} events with COPY")
        gen = fleetgen.load(url, stores, events_per_store, log=log)
        sizes = {
            name: int(server.psql(f"SELECT pg_total_relation_size('{name}')", "fleet"))
            for name in ("fleet_events", "fleet_allocations", "fleet_stores")
        }

        log(f"fleet: building {ship_stores:,} node stores × {pods} pods")
        template = os.path.join(root, "template.db")
        PodStore.open(template).close()
        paths = []
        for n in range(ship_stores):
            path = os.path.join(root, f"{n:04d}.db")
            shutil.copy(template, path)
            paths.append(path)
        t0 = time.perf_counter()
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(2) as pool:
            pool.map(_build, [(p, stores + n, pods) for n, p in enumerate(paths)])
        build_s = time.perf_counter() - t0

        # The probes: a generated store's device, at an instant inside every history.
        probe_n = stores // 3
        probe_device = fleetgen.device(probe_n, 7)
        probe_at = fleetgen.ts_of(probe_n, events_per_store // 2)
        expected = fleetgen.owners_at(probe_n, events_per_store, probe_device, probe_at)
        until = max(fleetgen.ts_of(s.n, s.last_seq) for s in gen.stores)
        since = _month_before(until)

        with db.connection(target) as conn:

            def double_allocations() -> object:
                with conn.begin():
                    return conn.execute(text("SELECT * FROM v_fleet_double_allocations")).all()

            def owners_at() -> object:
                return read.owners(target, probe_device, at=probe_at).rows

            def nodes() -> object:
                return read.nodes(target).rows

            questions = {
                "owners_at_one_device": owners_at,
                "v_fleet_double_allocations": double_allocations,
                "fleet_nodes": nodes,
            }

            def usage() -> object:
                return read.usage(target, by="namespace", since=since, until=until).rows

            log("fleet: query latencies, quiet")
            quiet = {name: _latency(fn, 30) for name, fn in questions.items()}
            got = [(r[2], r[3], r[4]) for r in read.owners(target, probe_device, at=probe_at).rows]
            assert got == expected, (got, expected)
            log(f"fleet: a month's usage per namespace ({since} … {until}), quiet")
            quiet["usage_month_by_namespace"] = _latency(usage, USAGE_REPS)
            month = read.usage(target, by="namespace", since=since, until=until).dicts()
            if stores <= 1_000:
                # The generator's own model, replayed (too slow to replay 10,000 stores).
                _check_usage(month, stores, events_per_store, since, until)
            usage_plan = _explain(target, since, until)
            log("fleet: the same usage computed from the history at read (the view), once")
            recomputed_s, recomputed_plan = _recomputed(target, since, until)

            busy: dict[str, list[float]] = {name: [] for name in questions}
            asking_cpu = [0.0]

            def ask_while_shipping(done: threading.Event) -> None:
                cpu0 = time.thread_time()
                while not done.is_set():
                    for name, fn in questions.items():
                        t0 = time.perf_counter()
                        fn()
                        busy[name].append(time.perf_counter() - t0)
                asking_cpu[0] = time.thread_time() - cpu0

            # The usage runs asked while the shippers run, each (seconds, ended after them),
            # and their catch-ups (seconds, events taken in): a run is its catch-up of what
            # was shipped since the last one, then read.usage (whose own catch-up then finds
            # the little shipped meanwhile).
            usage_busy: list[tuple[float, bool]] = []
            catch_ups: list[tuple[float, int]] = []

            def usage_while_shipping(done: threading.Event) -> None:
                while not done.is_set():
                    t0 = time.perf_counter()
                    took = read.catch_up(target)
                    catch_ups.append((time.perf_counter() - t0, took))
                    usage()
                    usage_busy.append((time.perf_counter() - t0, done.is_set()))

            def meanwhile(done: threading.Event) -> None:
                side = threading.Thread(target=usage_while_shipping, args=(done,))
                side.start()
                ask_while_shipping(done)
                side.join()

            log(f"fleet: shipping with {shippers} shippers, asking meanwhile")
            load_at_ship = os.getloadavg()[0]
            shipped = _parallel(_ship_worker, url, paths, shippers, server, meanwhile)
        events, ship_s = int(shipped["events"]), shipped["wall_s"]
        under_ingest = {name: _summary(s) for name, s in busy.items() if s}
        if usage_busy:
            under_ingest["usage_month_by_namespace"] = {
                **_summary([t for t, _ in usage_busy]),
                "ended_after_shipping": sum(1 for _, late in usage_busy if late),
            }
        # What was shipped after the last run: caught up quiet, once.
        t0 = time.perf_counter()
        last_took = read.catch_up(target)
        catch_ups.append((time.perf_counter() - t0, last_took))
        caught_events = sum(n for _, n in catch_ups)
        catch_up = {
            "runs": len(catch_ups),
            "events": caught_events,
            "seconds": sum(t for t, _ in catch_ups),
            "s_per_1000_events": (
                1000 * sum(t for t, n in catch_ups if n) / caught_events if caught_events else None
            ),
            "last_quiet_s": catch_ups[-1][0],
            "last_quiet_events": last_took,
        }
        # The same work quiet: every shipped store's history taken in again from nothing (its
        # mark set back to 0), in one catch-up; the kept rows must come out as they were.
        log("fleet: the shipped stores' catch-up again, quiet")
        shipped_stores = "SELECT store_id FROM fleet_stores WHERE node NOT LIKE 'gen-%'"
        kept = (
            f"SELECT count(*), sum(share) FROM fleet_intervals WHERE store_id IN ({shipped_stores})"
        )
        with db.transaction(target) as conn:
            before = tuple(conn.execute(text(kept)).one())
            conn.execute(
                text(
                    f"UPDATE fleet_intervals_marks SET seq = 0 WHERE store_id IN ({shipped_stores})"
                )
            )
        t0 = time.perf_counter()
        again = read.catch_up(target)
        again_s = time.perf_counter() - t0
        with db.transaction(target) as conn:
            assert tuple(conn.execute(text(kept)).one()) == before
        catch_up["quiet_events"] = again
        catch_up["quiet_s"] = again_s
        catch_up["quiet_s_per_1000_events"] = 1000 * again_s / again if again else None

        log("fleet: fleet verify")
        t0 = time.perf_counter()
        checked = read.verify(target)
        verify_s = time.perf_counter() - t0
        broken = [r for r in checked.dicts() if r["problem"] is not None]
        assert not broken, broken[:3]
        verify_node = _latency(lambda: read.verify(target, node=f"gen-{probe_n:05d}"), 5)

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
        counts: dict[str, int] = {}
        with db.transaction(target) as conn:
            for name in ("fleet_events", "fleet_allocations", "fleet_entries", "fleet_stores"):
                counts[name] = int(conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one())
            doubles = conn.execute(
                text("SELECT count(*) FROM v_fleet_double_allocations")
            ).scalar_one()
        return {
            "stores": stores,
            "events_per_store": events_per_store,
            "generated_events": gen.events,
            "generate_s": gen.load_s,
            "index_s": gen.index_s,
            "fill_s": gen.fill_s,
            "generated_digest": fleetgen.digest(gen.stores),
            "sizes_bytes": sizes,
            "ship_stores": ship_stores,
            "pods_per_store": pods,
            "shippers": shippers,
            "build_s": build_s,
            "events": events,
            "ship_s": ship_s,
            "events_per_s": events / ship_s,
            "ship_client_cpu_s": shipped["client_cpu_s"],
            # Every server process meanwhile: the shippers' backends, those answering the
            # questions, the WAL writer and the rest of the background.
            "ship_server_cpu_s": shipped["server_cpu_s"],
            # The shippers' own backends: the server's cost of shipping, whatever the load.
            "ship_backend_cpu_s": shipped["backend_cpu_s"],
            "asking_client_cpu_s": asking_cpu[0],
            # What 2 idle cores would ingest: events per CPU-second the shippers and their
            # backends spent, × 2 (the questions asked meanwhile left out).
            "ship_events_per_2_cpu_s": 2
            * events
            / (shipped["client_cpu_s"] + shipped["backend_cpu_s"]),
            "copy_events_per_2_cpu_s": 2 * copied / (copy["client_cpu_s"] + copy["server_cpu_s"]),
            "load_avg_1m": os.getloadavg()[0],
            "load_avg_at_ship": load_at_ship,
            "copy_events": copied,
            "copy_s": copy_s,
            "copy_events_per_s": copied / copy_s,
            "rows": counts,
            "double_allocation_rows": int(doubles),
            "quiet": quiet,
            "under_ingest": under_ingest,
            "usage_window": [since, until],
            "usage_namespaces": len(month),
            "usage_intervals": sum(int(r["intervals"]) for r in month),
            "usage_device_hours": sum(float(r["device_seconds"]) for r in month) / 3600,
            "usage_plan": usage_plan,
            "usage_recomputed_s": recomputed_s,
            "usage_recomputed_plan": recomputed_plan,
            "catch_up": catch_up,
            "kept_intervals": int(server.psql("SELECT count(*) FROM fleet_intervals", "fleet")),
            "verify_s": verify_s,
            "verify_one_node": verify_node,
            "settings": SETTINGS,
            "server": server.psql("SHOW server_version").strip(),
        }
    finally:
        db.dispose_all()
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


def _month_before(stored: str) -> str:
    from datetime import datetime, timedelta

    moment = datetime.fromisoformat(stored.replace("Z", "+00:00")) - timedelta(seconds=MONTH_S)
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


def _check_usage(
    rows: list[dict[str, Any]], stores: int, events_per_store: int, since: str, until: str
) -> None:
    """The fleet's month per namespace equals the sum of every store's model."""
    want: dict[str | None, float] = {}
    for n in range(stores):
        for ns, seconds in fleetgen.usage_by_namespace(n, events_per_store, since, until).items():
            want[ns] = want.get(ns, 0.0) + seconds
    got = {r["namespace"]: float(r["device_seconds"]) for r in rows}
    assert got.keys() == want.keys(), (sorted(map(str, got)), sorted(map(str, want)))
    bad = {ns: (got[ns], want[ns]) for ns in want if abs(got[ns] - want[ns]) > 1e-3 * stores}
    assert not bad, bad


def _explain(target: Any, since: str, until: str) -> str:
    """The usage statement's plan, run once (EXPLAIN ANALYZE): where its time goes."""
    from sqlalchemy import text

    from podstore.fleet import db
    from podstore.fleet import sql as q

    with db.transaction(target) as conn:
        rows = conn.execute(
            text("EXPLAIN (ANALYZE, BUFFERS) " + q.usage_sql("namespace", False)),
            {"since": since, "until": until, "resource": None},
        )
        return "\n".join(r[0] for r in rows)


def _recomputed(target: Any, since: str, until: str) -> tuple[float, str]:
    """The baseline: the usage statement over v_fleet_allocation_intervals, which computes
    every interval from the whole history at each read (as every read did before fleet
    revision f0009 kept them), run once under EXPLAIN ANALYZE: its wall time and its plan."""
    from sqlalchemy import text

    from podstore.fleet import db

    statement = """
    SELECT namespace, sum(seconds) AS device_seconds, count(*) AS intervals
    FROM (
        SELECT namespace,
               share * extract(epoch FROM
                   least(coalesce("end", CAST(:until AS timestamptz)),
                         CAST(:until AS timestamptz))
                   - greatest(start, CAST(:since AS timestamptz))) AS seconds
        FROM v_fleet_allocation_intervals
        WHERE start < CAST(:until AS timestamptz)
          AND ("end" IS NULL OR "end" > CAST(:since AS timestamptz))
    ) clipped
    GROUP BY namespace
    ORDER BY namespace
    """
    with db.transaction(target) as conn:
        t0 = time.perf_counter()
        rows = conn.execute(
            text("EXPLAIN (ANALYZE, BUFFERS) " + statement), {"since": since, "until": until}
        )
        plan = "\n".join(r[0] for r in rows)
        return time.perf_counter() - t0, plan


_NAMES = {
    "owners_at_one_device": "owners at a time, one device",
    "v_fleet_double_allocations": "v_fleet_double_allocations",
    "fleet_nodes": "fleet nodes",
}
_USAGE = "usage_month_by_namespace"
_USAGE_NAME = "a month's usage per namespace"


def verdicts(res: dict[str, Any]) -> list[tuple[str, float, float, bool, str]]:
    """(target, measured, limit, passed, detail) per target."""
    ingest = res["events_per_s"]

    def per(cpu_s: float) -> str:
        return f"{cpu_s * 1e6 / res['events']:.1f} µs"

    out = [
        (
            f"ship ≥ {TARGET_EVENTS_PER_S:,.0f} events/s ({res['shippers']} shippers) on top of "
            f"{res['generated_events']:,} events",
            ingest,
            TARGET_EVENTS_PER_S,
            ingest >= TARGET_EVENTS_PER_S,
            f"{res['events']:,} events in {res['ship_s']:.1f}s; COPY baseline "
            f"{res['copy_events_per_s']:,.0f}/s (ship = {ingest / res['copy_events_per_s']:.0%}); "
            f"CPU per event: {per(res['ship_client_cpu_s'])} shippers + "
            f"{per(res['ship_backend_cpu_s'])} their PostgreSQL backends = "
            f"{res['ship_events_per_2_cpu_s']:,.0f} events/s on 2 idle cores (COPY "
            f"{res['copy_events_per_2_cpu_s']:,.0f}); every server process meanwhile "
            f"{res['ship_server_cpu_s']:.1f}s, the questions' client "
            f"{res['asking_client_cpu_s']:.1f}s; load average {res['load_avg_at_ship']:.1f} "
            f"when shipping began",
        )
    ]
    if _USAGE in res["quiet"]:
        quiet = res["quiet"][_USAGE]
        sizes = (
            f"{res['rows']['fleet_events']:,} events, {res['rows']['fleet_stores']:,} stores; "
            f"{res['usage_intervals']:,} intervals, {res['usage_namespaces']} namespaces, "
            f"{res['usage_device_hours']:,.0f} device-hours"
        )
        out.append(
            (
                f"{_USAGE_NAME} p50 ≤ {TARGET_USAGE_S:g} s, quiet",
                quiet["p50_s"],
                TARGET_USAGE_S,
                quiet["p50_s"] <= TARGET_USAGE_S,
                f"{quiet['reps']} runs, min {quiet['min_s']:.2f} s; {sizes}; computed from the "
                f"history at read (the view): {res['usage_recomputed_s']:.1f} s; the kept "
                f"intervals' fill from the whole history (the upgrade): {res['fill_s']:.1f} s",
            )
        )
        busy = res["under_ingest"].get(_USAGE)
        if busy is not None:
            out.append(
                (
                    f"{_USAGE_NAME} p50 ≤ {TARGET_USAGE_S:g} s while shipping",
                    busy["p50_s"],
                    TARGET_USAGE_S,
                    busy["p50_s"] <= TARGET_USAGE_S,
                    f"runs begun while the shippers ran: {busy['reps']} "
                    f"({busy['ended_after_shipping']} ended after them), each with its catch-up "
                    f"of what was shipped meanwhile; catch-ups: {_catch_up_text(res)}; {sizes}",
                )
            )
    for key, name in _NAMES.items():
        busy = res["under_ingest"].get(key)
        quiet = res["quiet"][key]
        if busy is None:
            continue
        out.append(
            (
                f"{name} p50 < {TARGET_QUERY_S * 1000:.0f} ms while shipping",
                busy["p50_s"],
                TARGET_QUERY_S,
                busy["p50_s"] < TARGET_QUERY_S,
                f"p95 {busy['p95_s'] * 1000:.1f} ms ({busy['reps']} asked); quiet p50 "
                f"{quiet['p50_s'] * 1000:.1f} ms; {res['rows']['fleet_events']:,} events, "
                f"{res['rows']['fleet_stores']:,} stores",
            )
        )
    return out


def _catch_up_text(res: dict[str, Any]) -> str:
    c = res.get("catch_up")
    if not c or not c["events"]:
        return "none took anything in"
    text = (
        f"{c['events']:,} events in {c['runs']} runs, {c['seconds']:.1f} s, "
        f"{c['s_per_1000_events'] * 1000:.0f} ms per 1,000 events; the last, quiet: "
        f"{c['last_quiet_events']:,} events in {c['last_quiet_s']:.2f} s"
    )
    if c.get("quiet_events"):
        text += (
            f"; every shipped store's history again, quiet: {c['quiet_events']:,} events in "
            f"{c['quiet_s']:.2f} s, {c['quiet_s_per_1000_events'] * 1000:.0f} ms per 1,000"
        )
    return text


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "## Fleet (PostgreSQL)",
        "",
        f"{res['stores']:,} generated stores × {res['events_per_store']:,} events "
        f"({res['generated_events']:,}, chained; COPY {res['generate_s']:.0f} s + indexes "
        f"{res['index_s']:.0f} s + the kept intervals' fill {res.get('fill_s', 0.0):.0f} s; "
        "fleet_events "
        f"{res['sizes_bytes']['fleet_events'] / 2**30:.1f} GiB with its indexes), then "
        f"{res['ship_stores']:,} node stores × "
        f"{res['pods_per_store']} pods shipped by {res['shippers']} parallel shippers into one "
        f"PostgreSQL {res['server']} (throwaway server, fsync on, "
        + ", ".join(f"{k} {v}" for k, v in res["settings"].items())
        + ").",
        "",
        "| target | measured | limit | verdict | detail |",
        "|---|---|---|---|---|",
    ]
    for name, measured, limit, passed, detail in verdicts(res):
        if "events/s" in name:
            shown, lim = f"{measured:,.0f}/s", f"{limit:,.0f}/s"
        elif limit >= 1:
            shown, lim = f"{measured:.3f} s", f"{limit:g} s"
        else:
            shown, lim = f"{measured * 1000:.1f} ms", f"{limit * 1000:.0f} ms"
        lines.append(f"| {name} | {shown} | {lim} | {'PASS' if passed else 'MISS'} | {detail} |")
    lines += ["", "| question | quiet p50 | quiet p95 | shipping p50 | shipping p95 |"]
    lines.append("|---|---|---|---|---|")
    for key, name in (*_NAMES.items(), (_USAGE, _USAGE_NAME)):
        if key not in res["quiet"]:
            continue
        q = res["quiet"][key]
        b = res["under_ingest"].get(key, {"p50_s": float("nan"), "p95_s": float("nan")})
        lines.append(
            f"| {name} | {q['p50_s'] * 1000:.2f} ms | {q['p95_s'] * 1000:.2f} ms | "
            f"{b['p50_s'] * 1000:.2f} ms | {b['p95_s'] * 1000:.2f} ms |"
        )
    lines += [
        "",
        f"`fleet verify` of all {res['rows']['fleet_stores']:,} stores "
        f"({res['rows']['fleet_events']:,} events): {res['verify_s']:.1f} s; of one node: "
        f"{res['verify_one_node']['p50_s'] * 1000:.1f} ms p50.",
        "",
        f"Rows: {', '.join(f'{k} {v:,}' for k, v in res['rows'].items())}; "
        f"{res['double_allocation_rows']} double-allocation rows. Node stores built in "
        f"{res['build_s']:.0f} s (not timed). Generated fleet digest {res['generated_digest']}.",
        "",
    ]
    if "usage_plan" in res:
        since, until = res["usage_window"]
        lines += [
            f"The usage window: {since} … {until}. Its statement's plan (EXPLAIN ANALYZE, one "
            "quiet run):",
            "",
            "```",
            res["usage_plan"],
            "```",
            "",
            "The same statement over v_fleet_allocation_intervals (every interval computed "
            f"from the history at read), once: {res['usage_recomputed_s']:.1f} s. Its plan:",
            "",
            "```",
            res["usage_recomputed_plan"],
            "```",
            "",
        ]
    return "\n".join(lines)


def _run(ctx: RunContext) -> dict[str, Any]:
    if getattr(ctx.cfg, "smoke", False):
        return run(ctx.workdir, ctx.log, stores=20, events_per_store=100, ship_stores=4, pods=5)
    if getattr(ctx.cfg, "quick", False):
        # --quick: a tenth of the generated fleet and a fifth of the shipped one.
        return run(ctx.workdir, ctx.log, stores=1_000, ship_stores=200)
    return run(ctx.workdir, ctx.log)


register(
    Section(
        "fleet",
        "10,000 stores / 10,000,000 events in one PostgreSQL; ingest and fleet questions on top",
        run=_run,
        render=lambda res: "\n" + markdown(res),
    )
)
