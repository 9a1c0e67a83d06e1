"""The benchmark run: every workload size, every section, every contender, in one process.

Results are plain dicts (JSON-ready): ``results["sizes"][i]["ops"][op][contender]`` holds the
per-call statistics of ``bench.measure.Stats`` (seconds); whole-state figures (import, export,
restart, memory) sit next to them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from bench import child, machine, rawsql, workload
from bench.kubelet import KubeletStyle, file_store_write, load_without_checksum
from bench.lean import LeanSqlite
from bench.measure import interleaved, stats
from bench.sections import RunContext, Section, register, selected
from bench.targets import RICH_RUN_OPTIONS
from podstore import PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint

#: What the open/memory targets are evaluated on: a checkpoint of exactly this many entries.
FIXTURE_ENTRIES = 100_000
#: The open target's second size (issue 31: open + first answer ≤ 4 ms at 50,000 entries).
OPEN_ENTRIES = 50_000


@dataclass(frozen=True, slots=True)
class Config:
    """How much to measure (``--quick`` shrinks every count and budget)."""

    sizes: tuple[int, ...]
    seed: int
    insert_reps: int
    read_reps: int
    open_reps: int
    bulk_reps: int
    # Per-contender time budgets (seconds) for the slow contenders.
    kubelet_insert_budget: float
    read_budget: float
    bulk_budget: float
    open_budget: float
    min_reps: int
    quick: bool
    #: ``--smoke``: every section at toy sizes, to show the bench still runs (figures meaningless).
    smoke: bool = False

    @classmethod
    def make(
        cls, sizes: tuple[int, ...], reps: int | None, quick: bool, seed: int, smoke: bool = False
    ) -> Config:
        if smoke:
            return cls(sizes, seed, 3, 3, 3, 1, 0.5, 0.2, 0.5, 1.0, 1, True, True)
        if quick:
            base = cls(sizes, seed, 300, 300, 3, 1, 3.0, 0.75, 5.0, 10.0, 2, True)
        else:
            base = cls(sizes, seed, 1000, 2000, 9, 3, 20.0, 3.0, 30.0, 40.0, 3, False)
        if reps is None:
            return base
        return cls(
            sizes,
            seed,
            reps,
            reps,
            max(3, reps // 100),
            max(1, reps // 300),
            base.kubelet_insert_budget,
            base.read_budget,
            base.bulk_budget,
            base.open_budget,
            base.min_reps,
            quick,
        )


Log = Callable[[str], None]


def _remove_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


def _new_store(path: str) -> PodStore:
    """A fresh store (schema created, untimed)."""
    _remove_db(path)
    return PodStore.open(path)


def _opened(path: str, **options: Any) -> PodStore:
    """A store opened as a caller opens it, once its open-time check is done: the per-call
    figures measure calls, not the background quick_check of verify="auto" (whose CPU would
    count for the first call, which waits for it; the restart section measures the open)."""
    store = PodStore.open(path, **options)
    store.wait_verified()
    return store


def _stats(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    return {name: stats(s).as_dict() for name, s in samples.items() if s}


def _checkpoint_fsync(path: str) -> None:
    """Push a store's WAL into the database file (untimed housekeeping between phases)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def wal_frames(path: str) -> int:
    """Frames in the store's write-ahead log: mxFrame of the wal-index header (-shm)."""
    try:
        with open(path + "-shm", "rb") as f:
            header = f.read(20)
    except FileNotFoundError:
        return 0
    return int.from_bytes(header[16:20], sys.byteorder) if len(header) == 20 else 0


class SizeRun:
    """All measurements at one state size (``pods`` pods already in every store)."""

    def __init__(
        self,
        cfg: Config,
        workdir: str,
        pods: int,
        allocations: list[workload.Allocation],
        registered: dict[str, list[str]],
        log: Log,
        small_db: tuple[int, str] | None = None,
    ) -> None:
        self.cfg = cfg
        #: (pods, path) of a copy of the smallest size's store: its inserts are interleaved
        #: with this size's, so the growth ratio is measured in one loop.
        self.small_db = small_db
        self.small_copy = os.path.join(workdir, f"small-n{pods}.db")
        self.dir = os.path.join(workdir, f"n{pods}")
        os.makedirs(self.dir, exist_ok=True)
        self.pods = pods
        self.allocations = allocations
        self.entries: list[PodDevicesEntry] = [a.entry() for a in allocations]
        self.registered = registered
        self.log = log
        self.result: dict[str, Any] = {
            "pods": pods,
            "entries": len(allocations),
            "device_rows": sum(len(ids) for a in allocations for ids in a.devices.values()),
            "mean_alloc_resp_bytes": (
                sum(len(e.alloc_resp or b"") for e in self.entries) / max(len(self.entries), 1)
            ),
            "ops": {},
            "checks": [],
        }
        self.ckpt = os.path.join(self.dir, "kubelet_internal_checkpoint")
        self.db = os.path.join(self.dir, "podstore.db")
        self.raw_db = os.path.join(self.dir, "raw.db")
        self.lean_db = os.path.join(self.dir, "lean.db")
        self.kubelet: KubeletStyle | None = None
        self.kubelet_devices: dict[str, set[str]] = {}
        self.first_import = 0.0
        rng = random.Random(cfg.seed + pods)
        picks = [rng.choice(allocations) for _ in range(1000)]
        self.keys = [(a.pod_uid, a.container_name, a.resource_name) for a in picks]
        self.device_keys = [
            rng.choice([d for ids in a.devices.values() for d in ids]) for a in picks
        ]
        # Containers whose response holds mounts, devices and annotations besides envs (drawn
        # after the others, which stay as they were).
        rich = [
            a
            for a in allocations
            if a.alloc_resp.mounts and a.alloc_resp.devices and a.alloc_resp.annotations
        ]
        rich_picks = [rng.choice(rich) for _ in range(1000)] if rich else []
        self.rich_keys = [(a.pod_uid, a.container_name) for a in rich_picks]

    # ---- phases ---------------------------------------------------------------------------

    def run(self, names: set[str]) -> dict[str, Any]:
        """The prepared state (checkpoint file, podstore store, maps), then each selected
        per-size section in registration order."""
        t0 = time.perf_counter()
        data = dumps_checkpoint(self.entries, self.registered)
        self.result["checkpoint_encode_s"] = time.perf_counter() - t0
        self.result["checkpoint_bytes"] = len(data)
        file_store_write(self.ckpt, data)
        del data
        self.log(
            f"  {self.pods} pods: {len(self.entries)} entries, "
            f"{self.result['checkpoint_bytes'] / 1e6:.1f} MB checkpoint"
        )
        self.setup()
        try:
            for section in PER_SIZE:
                if section.name in names and not (
                    self.cfg.quick and self.pods > 10_000 and section.name in HEAVY_IN_QUICK
                ):
                    self.log(f"    {section.name}")
                    section.run(self)
        finally:
            self.kubelet = None
            gc.collect()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.result

    def setup(self) -> None:
        """The store every section measures on: this state imported (also the first import
        sample), its small-store copy, the kubelet-style maps, the lean store."""
        _remove_db(self.db)
        main = PodStore.open(self.db)
        t0 = time.perf_counter()
        main.import_checkpoint(self.ckpt)
        self.first_import = time.perf_counter() - t0
        main.close()
        _checkpoint_fsync(self.db)
        if self.pods == min(self.cfg.sizes):
            self.copy_db(self.small_copy)
        self.kubelet = KubeletStyle.load(self.ckpt)
        _remove_db(self.lean_db)
        lean = LeanSqlite(self.lean_db)
        lean.load(self.entries)
        lean.close()
        _checkpoint_fsync(self.lean_db)

    def bulk(self) -> None:
        """Import a whole checkpoint: podstore (file and entries) against the kubelet-style
        load of the same file and a raw executemany of the core rows alone."""
        n = len(self.entries)
        full = not self.cfg.quick
        first_import = self.first_import
        core = rawsql.bulk_rows(self.entries)
        paths = {
            "podstore_import": os.path.join(self.dir, "imp.db"),
            "podstore_from_checkpoint_data": os.path.join(self.dir, "fcd.db"),
            "raw_executemany_core": os.path.join(self.dir, "raw_core.db"),
        }

        def fresh(name: str) -> str:
            path = paths[name]
            _remove_db(path)
            PodStore.open(path).close()
            return path

        def podstore_import(_: int) -> float:
            store = PodStore.open(fresh("podstore_import"))
            t0 = time.perf_counter()
            store.import_checkpoint(self.ckpt)
            dt = time.perf_counter() - t0
            store.close()
            _remove_db(paths["podstore_import"])
            return dt

        def podstore_fcd(_: int) -> float:
            store = PodStore.open(fresh("podstore_from_checkpoint_data"))
            t0 = time.perf_counter()
            store.from_checkpoint_data(self.entries)
            dt = time.perf_counter() - t0
            store.close()
            _remove_db(paths["podstore_from_checkpoint_data"])
            return dt

        def raw_core(_: int) -> float:
            path = fresh("raw_executemany_core")
            t0 = time.perf_counter()
            rawsql.executemany_load(path, core)
            dt = time.perf_counter() - t0
            _remove_db(path)
            return dt

        def kubelet_load(_: int) -> float:
            gc.collect()
            t0 = time.perf_counter()
            loaded = KubeletStyle.load(self.ckpt)
            dt = time.perf_counter() - t0
            # Same answer as the store the import wrote (cross-check, untimed).
            if loaded.maps.devices() != self.kubelet_devices:
                self.result["checks"].append("import: kubelet-style load and podstore differ")
            del loaded
            return dt

        def checksumless_load(_: int) -> float:
            gc.collect()
            t0 = time.perf_counter()
            maps = load_without_checksum(self.ckpt)
            dt = time.perf_counter() - t0
            if maps.devices() != self.kubelet_devices:
                self.result["checks"].append("import: checksum-less load and podstore differ")
            del maps
            return dt

        self.kubelet_devices = self.kubelet.maps.devices() if self.kubelet else {}
        with PodStore.open(self.db, readonly=True) as imported:
            if imported.devices() != self.kubelet_devices:
                self.result["checks"].append("import: podstore's devices() differ from the maps")
        contenders: dict[str, Callable[[int], object]] = {
            "podstore_import": podstore_import,
            "kubelet_load": kubelet_load,
            "checksumless_load": checksumless_load,
            "raw_executemany_core": raw_core,
        }
        if full:
            contenders["podstore_from_checkpoint_data"] = podstore_fcd
        samples = interleaved(
            contenders,
            self.cfg.bulk_reps,
            budget_s=self.cfg.bulk_budget,
            min_reps=1,
            max_reps={"podstore_import": self.cfg.bulk_reps - 1},
        )
        samples["podstore_import"].insert(0, first_import)
        self.result["ops"]["import"] = _stats(samples)
        self.result["import_throughput_entries_per_s"] = {
            name: n / stats(s).p50 for name, s in samples.items() if s
        }

    def copy_db(self, path: str) -> None:
        """A page-for-page copy of the podstore file (same ids, same layout)."""
        _remove_db(path)
        src = sqlite3.connect(self.db)
        dst = sqlite3.connect(path)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()

    def make_raw(self) -> rawsql.RawSqlite:
        self.copy_db(self.raw_db)
        return rawsql.RawSqlite(self.raw_db)

    def write_profile(self) -> None:
        """Statements per insert and delete, and WAL frames (pages) each commit writes, for
        podstore and the lean baseline, on scratch copies (untimed; autocheckpoint off so
        that the log only grows)."""
        fresh = workload.fresh_allocations(60, self.cfg.seed + 1)
        path = os.path.join(self.dir, "profile.db")
        self.copy_db(path)
        scratch = PodStore.open(path, verify="off")
        lean_path = os.path.join(self.dir, "profile-lean.db")
        shutil.copy(self.lean_db, lean_path)
        lean = LeanSqlite(lean_path)
        frames: dict[str, list[int]] = {k: [] for k in ("insert", "delete", "lean_insert")}
        try:
            scratch._sessions.conn().execute("PRAGMA wal_autocheckpoint = 0")
            lean.conn.execute("PRAGMA wal_autocheckpoint = 0")
            a = fresh[0]
            calls, _ = rawsql.record(
                scratch,
                partial(
                    scratch.insert,
                    a.pod_uid,
                    a.container_name,
                    a.resource_name,
                    a.devices,
                    a.alloc_resp,
                ),
            )
            dcalls, _ = rawsql.record(scratch, partial(scratch.delete, [a.pod_uid]))
            for a in fresh[1:]:
                f0 = wal_frames(path)
                scratch.insert(
                    a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp
                )
                f1 = wal_frames(path)
                scratch.delete([a.pod_uid])
                frames["insert"].append(f1 - f0)
                frames["delete"].append(wal_frames(path) - f1)
                f0 = wal_frames(lean_path)
                lean.insert(a)
                frames["lean_insert"].append(wal_frames(lean_path) - f0)
                lean.delete(a.pod_uid)
        finally:
            scratch.close()
            lean.close()
            _remove_db(path)
            _remove_db(lean_path)
        self.result["statements_per_call"] = {"insert": len(calls), "delete": len(dcalls)}
        self.result["wal_frames_per_call"] = {
            k: sorted(v)[len(v) // 2] for k, v in frames.items() if v
        }

    def insert_delete(self) -> None:
        """Durable insert of one container's allocation, then delete of that pod."""
        cfg = self.cfg
        ks = self.kubelet
        assert ks is not None
        self.write_profile()
        fresh = workload.fresh_allocations(cfg.insert_reps, cfg.seed)
        fresh_bytes = [a.alloc_resp.SerializeToString(deterministic=True) for a in fresh]
        deletes: dict[str, list[float]] = {"podstore": [], "lean_sqlite": [], "kubelet": []}
        store = _opened(self.db)
        lean = LeanSqlite(self.lean_db)
        small = None if self.small_db is None else _opened(self.small_db[1])
        log_path = os.path.join(self.dir, "fsync.log")
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        clock = time.perf_counter
        check = fresh[0]
        store.insert(
            check.pod_uid,
            check.container_name,
            check.resource_name,
            check.devices,
            check.alloc_resp,
        )
        lean.insert(check)
        key = (check.pod_uid, check.container_name, check.resource_name)
        if store.container_devices(*key) != lean.container_devices(*key):
            self.result["checks"].append("insert: podstore and the lean store differ")
        store.delete([check.pod_uid])
        lean.delete(check.pod_uid)

        def ps(i: int) -> float:
            a = fresh[i]
            t0 = clock()
            store.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
            t1 = clock()
            store.delete([a.pod_uid])
            deletes["podstore"].append(clock() - t1)
            return t1 - t0

        def ln(i: int) -> float:
            a = fresh[i]
            t0 = clock()
            lean.insert(a)
            t1 = clock()
            lean.delete(a.pod_uid)
            deletes["lean_sqlite"].append(clock() - t1)
            return t1 - t0

        def kb(i: int) -> float:
            a = fresh[i]
            t0 = clock()
            ks.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
            t1 = clock()
            ks.delete(a.pod_uid)
            deletes["kubelet"].append(clock() - t1)
            return t1 - t0

        def sm(i: int) -> float:
            assert small is not None
            a = fresh[i]
            t0 = clock()
            small.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
            t1 = clock()
            small.delete([a.pod_uid])
            return t1 - t0

        # What any kubelet-style writer pays whatever its encoder: the I/O of rewriting this
        # state's checkpoint (the bytes are encoded once, outside the loop).
        with open(self.ckpt, "rb") as f:
            ckpt_bytes = f.read()
        io_path = os.path.join(self.dir, "io_only_checkpoint")

        def kio(i: int) -> None:
            file_store_write(io_path, ckpt_bytes)

        def fs(i: int) -> None:
            # A record as small as the entry itself: the floor for any durable commit.
            os.write(fd, fresh_bytes[i])
            os.fsync(fd)

        def ps_b(i: int) -> float:
            a = fresh[i]
            t0 = clock()
            store.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
            t1 = clock()
            store.delete([a.pod_uid])
            return t1 - t0

        # Loop A: podstore against the floors (and, at the largest size, against the smallest
        # store). Loop B: podstore against kubelet-style. Kept apart because a kubelet-style
        # call rewrites and frees a whole checkpoint file (117 MB at 100,000 pods), and the
        # file-system work that leaves behind lands on whichever small fsync comes next.
        loop_a: dict[str, Callable[[int], object]] = {
            "podstore": ps,
            "lean_sqlite": ln,
            "raw_fsync": fs,
        }
        if small is not None:
            loop_a["podstore_small_store"] = sm
        loop_b: dict[str, Callable[[int], object]] = {
            "podstore_kubelet_loop": ps_b,
            "kubelet": kb,
            "kubelet_io_only": kio,
        }
        io0 = machine.io_counters(self.dir)
        try:
            samples = interleaved(loop_a, cfg.insert_reps, budget_s=cfg.kubelet_insert_budget)
            self.result["insert_phase_io"] = machine.io_delta(io0, machine.io_counters(self.dir))
            samples.update(
                interleaved(
                    loop_b,
                    cfg.insert_reps,
                    budget_s=cfg.kubelet_insert_budget,
                    min_reps=1 if cfg.quick else cfg.min_reps,
                )
            )
        finally:
            os.close(fd)
            store.close()
            lean.close()
            if small is not None:
                small.close()
        if self.small_db is not None:
            self.result["small_store_pods"] = self.small_db[0]
        self.result["ops"]["insert"] = _stats(samples)
        self.result["ops"]["delete"] = _stats(deletes)

    def cpu(self) -> None:
        """CPU per insert at durability="normal" (no fsync per commit): podstore against the
        lean baseline, interleaved; process CPU time per call, so the WAL checkpoints a call
        runs count for the call that runs them."""
        cfg = self.cfg
        fresh = workload.fresh_allocations(cfg.insert_reps, cfg.seed + 2)
        store = _opened(self.db, durability="normal")
        lean = LeanSqlite(self.lean_db, synchronous="NORMAL")
        cpu = time.process_time
        spent: dict[str, list[float]] = {"podstore": [], "lean_sqlite": []}

        def ps(i: int) -> float:
            a = fresh[i]
            c0, t0 = cpu(), time.perf_counter()
            store.insert(a.pod_uid, a.container_name, a.resource_name, a.devices, a.alloc_resp)
            t1, c1 = time.perf_counter(), cpu()
            store.delete([a.pod_uid])
            spent["podstore"].append(c1 - c0)
            return t1 - t0

        def ln(i: int) -> float:
            a = fresh[i]
            c0, t0 = cpu(), time.perf_counter()
            lean.insert(a)
            t1, c1 = time.perf_counter(), cpu()
            lean.delete(a.pod_uid)
            spent["lean_sqlite"].append(c1 - c0)
            return t1 - t0

        try:
            wall = interleaved({"podstore": ps, "lean_sqlite": ln}, cfg.insert_reps, budget_s=60)
        finally:
            store.close()
            lean.close()
        self.result["ops"]["insert_normal"] = _stats(wall)
        self.result["cpu_per_insert_normal_s"] = {
            k: {"mean_s": sum(v) / len(v), **stats(v).as_dict()} for k, v in spent.items() if v
        }

    def reads(self) -> None:
        ks = self.kubelet
        assert ks is not None
        store = _opened(self.db)
        raw = self.make_raw()
        try:
            self._reads(store, raw, ks)
        finally:
            store.close()
            raw.close()

    def _reads(self, store: PodStore, raw: rawsql.RawSqlite, ks: KubeletStyle) -> None:
        cfg = self.cfg
        keys, devs = self.keys, self.device_keys
        mem = ks.maps
        k = min(len(keys), cfg.read_reps)
        rich = self.rich_keys
        r = max(min(len(rich), cfg.read_reps), 1)
        podstore_calls: dict[str, Callable[[int], object]] = {
            "container_devices": lambda i: store.container_devices(*keys[i % k]),
            "pod_devices": lambda i: store.pod_devices(keys[i % k][0], keys[i % k][2]),
            "devices": lambda i: store.devices(),
            "device_run_container_options": lambda i: store.device_run_container_options(
                *keys[i % k][:2]
            ),
            "get_container_devices": lambda i: store.get_container_devices(*keys[i % k][:2]),
            "get_pod_and_container_for_device": lambda i: store.get_pod_and_container_for_device(
                devs[i % k]
            ),
            RICH_RUN_OPTIONS: lambda i: store.device_run_container_options(*rich[i % r]),
        }
        memory_calls: dict[str, Callable[[int], object]] = {
            "container_devices": lambda i: mem.container_devices(*keys[i % k]),
            "pod_devices": lambda i: mem.pod_devices(keys[i % k][0], keys[i % k][2]),
            "devices": lambda i: mem.devices(),
            "device_run_container_options": lambda i: mem.device_run_container_options(
                *keys[i % k][:2]
            ),
            "get_container_devices": lambda i: mem.get_container_devices(*keys[i % k][:2]),
            "get_pod_and_container_for_device": lambda i: mem.get_pod_and_container_for_device(
                devs[i % k]
            ),
            RICH_RUN_OPTIONS: lambda i: mem.device_run_container_options(*rich[i % r]),
        }
        shapers: dict[str, Callable[[int, list[list[Any]]], object]] = {
            "container_devices": lambda i, r: rawsql.shape_container_devices(r),
            "pod_devices": lambda i, r: rawsql.shape_pod_devices(r),
            "devices": lambda i, r: rawsql.shape_devices(r),
            "device_run_container_options": lambda i, r: rawsql.shape_run_options(
                keys[i % k][0], keys[i % k][1], r
            ),
            "get_container_devices": lambda i, r: rawsql.shape_get_container_devices(r),
            "get_pod_and_container_for_device": lambda i, r: rawsql.shape_owner(r),
            RICH_RUN_OPTIONS: lambda i, rows: rawsql.shape_run_options(
                rich[i % r][0], rich[i % r][1], rows
            ),
        }
        if not rich:
            for table in (podstore_calls, memory_calls, shapers):
                del table[RICH_RUN_OPTIONS]
        for op, ps_call in podstore_calls.items():
            # podstore's statements for each key, recorded once (untimed), replayed raw.
            n_keys = 1 if op == "devices" else (r if op == RICH_RUN_OPTIONS else k)
            recorded = [rawsql.record(store, partial(ps_call, i))[0] for i in range(n_keys)]
            shape = shapers[op]

            def raw_call(
                i: int,
                recorded: list[list[rawsql.Call]] = recorded,
                shape: Callable[[int, list[list[Any]]], object] = shape,
            ) -> object:
                return shape(i, raw.replay(recorded[i % len(recorded)]))

            fns = {"podstore": ps_call, "raw_sqlite": raw_call, "memory": memory_calls[op]}
            # The three must give the same answer, or the comparison means nothing.
            for i in range(1 if op == "devices" else 2):
                answers = [fn(i) for fn in fns.values()]
                if not all(a == answers[0] for a in answers[1:]):
                    self.result["checks"].append(f"{op}: answers differ for call {i}")
            samples = interleaved(
                fns, cfg.read_reps, budget_s=cfg.read_budget, min_reps=cfg.min_reps
            )
            self.result["ops"][op] = _stats(samples)

    def export(self) -> None:
        """Write the whole state as a checkpoint file: podstore vs kubelet's own write."""
        ks = self.kubelet
        assert ks is not None
        store = _opened(self.db)
        out = os.path.join(self.dir, "export")
        os.makedirs(out, exist_ok=True)
        ks_path = ks.path
        ks.path = os.path.join(out, "kubelet_internal_checkpoint.kubelet")
        try:
            samples = interleaved(
                {
                    "podstore": lambda i: store.export_checkpoint(
                        os.path.join(out, "kubelet_internal_checkpoint.podstore")
                    ),
                    "kubelet": lambda i: ks.write_checkpoint(),
                },
                max(self.cfg.bulk_reps, 3) if self.pods <= 10_000 else self.cfg.bulk_reps,
                budget_s=self.cfg.bulk_budget,
                min_reps=1,
            )
        finally:
            ks.path = ks_path
            store.close()
        self.result["ops"]["export"] = _stats(samples)
        shutil.rmtree(out, ignore_errors=True)

    def restart(self) -> None:
        """Open-to-first-answer in fresh processes, and peak RSS of a file import."""
        opened = open_to_first_answer(
            self.db, self.ckpt, self.keys[0], self.cfg, self.result["checks"]
        )
        self.result["ops"]["open_to_first_answer"] = opened["ops"]
        self.result["import_time_s"] = opened["import_s"]
        self.result["peak_rss_kib"] = {
            "kubelet_load": opened["kubelet_maxrss_kib"],
            "kubelet_load_growth": opened["kubelet_growth_kib"],
        }
        mem = import_memory(os.path.join(self.dir, "rss.db"), self.ckpt)
        self.result["peak_rss_kib"]["podstore_import"] = mem["maxrss_kib"]
        self.result["peak_rss_kib"]["podstore_before_import"] = mem["rss_before_kib"]


def open_to_first_answer(
    db: str, ckpt: str, key: tuple[str, str, str], cfg: Config, checks: list[str]
) -> dict[str, Any]:
    """Restart cost: podstore open (default options, and verify="blocking") + one answer vs
    kubelet-style load + verify + rebuild maps + answer."""
    pod, container, resource = key
    modes = {"podstore": "auto", "podstore_blocking": "blocking"}
    imports: dict[str, list[float]] = {name: [] for name in (*modes, "kubelet")}
    answers: dict[str, Any] = {}
    rss: list[int] = []
    growth: list[int] = []

    def ps(name: str) -> Callable[[int], float]:
        def call(_: int) -> float:
            res = child.run("open-podstore", db, pod, container, resource, modes[name])
            imports[name].append(res.out["import_s"])
            answers[name] = res.out["answer"]
            return float(res.out["open_s"])

        return call

    def kb(_: int) -> float:
        res = child.run("open-kubelet", ckpt, pod, container, resource)
        imports["kubelet"].append(res.out["import_s"])
        answers["kubelet"] = res.out["answer"]
        rss.append(res.peak_rss_kib)
        growth.append(res.peak_rss_kib - int(res.out["rss_before_kib"]))
        return float(res.out["open_s"])

    samples = interleaved(
        {"podstore": ps("podstore"), "podstore_blocking": ps("podstore_blocking"), "kubelet": kb},
        cfg.open_reps,
        budget_s=cfg.open_budget,
        min_reps=1,
    )
    if not answers.get("podstore") == answers.get("podstore_blocking") == answers.get("kubelet"):
        checks.append("open_to_first_answer: podstore and kubelet answers differ")
    return {
        "ops": _stats(samples),
        "import_s": {k: stats(v).p50 for k, v in imports.items() if v},
        "kubelet_maxrss_kib": max(rss) if rss else None,
        # Peak minus the resident set just before the load, the largest of the runs.
        "kubelet_growth_kib": max(growth) if growth else None,
    }


def import_memory(db: str, ckpt: str, keep: bool = False) -> dict[str, Any]:
    """Peak RSS of a fresh process that imports ``ckpt`` into an empty store (kept if
    ``keep``). The store is created beforehand, in this process: creating a schema is a
    one-time step of its own (it loads Alembic), not part of an import."""
    _remove_db(db)
    PodStore.open(db).close()
    res = child.run("import", db, ckpt)
    if not keep:
        _remove_db(db)
    return {
        "maxrss_kib": res.peak_rss_kib,
        "rss_before_kib": res.out["rss_before_kib"],
        "import_s": res.out["import_s"],
        "entries": res.out["entries"],
    }


def fixture(ctx: RunContext) -> dict[str, Any]:
    """The targets' ``100,000 entries``: open-to-first-answer and import peak RSS."""
    cfg, workdir, log = ctx.cfg, ctx.workdir, ctx.log
    allocations = fixture_allocations(cfg)
    registered = workload.registered_for(allocations)
    entries = [a.entry() for a in allocations]
    d = os.path.join(workdir, "fixture")
    os.makedirs(d, exist_ok=True)
    ckpt = os.path.join(d, "kubelet_internal_checkpoint")
    db = os.path.join(d, "podstore.db")
    file_store_write(ckpt, dumps_checkpoint(entries, registered))
    log(f"  fixture: {len(entries)} entries, {os.path.getsize(ckpt) / 1e6:.1f} MB checkpoint")
    mem = import_memory(db, ckpt, keep=True)
    _checkpoint_fsync(db)
    first = allocations[len(entries) // 2]
    checks: list[str] = []
    size = os.path.getsize(ckpt)
    opened = open_to_first_answer(
        db, ckpt, (first.pod_uid, first.container_name, first.resource_name), cfg, checks
    )
    shutil.rmtree(d, ignore_errors=True)
    return {
        "entries": len(entries),
        "checkpoint_bytes": size,
        "open_to_first_answer": opened["ops"],
        "open_at": _open_at(allocations[: 1_000 if cfg.smoke else OPEN_ENTRIES], workdir, cfg, log),
        "import_time_s": opened["import_s"],
        "peak_rss_kib": {
            "podstore_import": mem["maxrss_kib"],
            "podstore_before_import": mem["rss_before_kib"],
            "kubelet_load": opened["kubelet_maxrss_kib"],
            "kubelet_load_growth": opened["kubelet_growth_kib"],
        },
        "podstore_import_s": mem["import_s"],
        "checks": checks,
    }


def _open_at(
    allocations: list[workload.Allocation], workdir: str, cfg: Config, log: Log
) -> dict[str, Any]:
    """Open-to-first-answer of a store of exactly these entries, against kubelet's load of
    the same checkpoint (the store made by an import, its WAL checkpointed: a clean close)."""
    d = os.path.join(workdir, "open-at")
    os.makedirs(d, exist_ok=True)
    ckpt = os.path.join(d, "kubelet_internal_checkpoint")
    db = os.path.join(d, "podstore.db")
    entries = [a.entry() for a in allocations]
    file_store_write(ckpt, dumps_checkpoint(entries, workload.registered_for(allocations)))
    log(f"  open at {len(entries):,} entries")
    import_memory(db, ckpt, keep=True)
    _checkpoint_fsync(db)
    middle = allocations[len(allocations) // 2]
    checks: list[str] = []
    opened = open_to_first_answer(
        db, ckpt, (middle.pod_uid, middle.container_name, middle.resource_name), cfg, checks
    )
    shutil.rmtree(d, ignore_errors=True)
    return {"entries": len(entries), "open_to_first_answer": opened["ops"], "checks": checks}


def fixture_allocations(cfg: Config) -> list[workload.Allocation]:
    """Exactly FIXTURE_ENTRIES entries: the first ones of a workload large enough."""
    pods = max(cfg.sizes)
    want = 2_000 if cfg.smoke else FIXTURE_ENTRIES
    allocs = workload.generate(pods, cfg.seed).allocations
    while len(allocs) < want:
        pods = int(pods * 1.1 * want / max(len(allocs), 1)) + 100
        allocs = workload.generate(pods, cfg.seed).allocations
    return allocs[:want]


# ---- the sections (bench/sections.py) -------------------------------------------------------

#: Sections skipped above 10,000 pods with --quick (restart and memory are left to the fixture).
HEAVY_IN_QUICK = ("export", "restart")
PER_SIZE = [
    register(Section("import", "import_checkpoint vs kubelet-style load", SizeRun.bulk, True)),
    register(
        Section(
            "insert",
            "durable insert/delete vs lean sqlite3, fsync, kubelet-style",
            SizeRun.insert_delete,
            True,
        )
    ),
    register(Section("cpu", "CPU per insert at durability=normal vs lean", SizeRun.cpu, True)),
    register(Section("reads", "podDevices reads vs in-memory maps", SizeRun.reads, True)),
    register(Section("export", "export_checkpoint vs kubelet's write", SizeRun.export, True)),
    register(Section("restart", "open-to-first-answer and import peak RSS", SizeRun.restart, True)),
]
register(Section("fixture", "restart and import memory at exactly 100,000 entries", fixture))


def run(cfg: Config, workdir: str, log: Log, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Every size (the per-size sections), then the global sections."""
    chosen = selected(only)
    names = {s.name for s in chosen}
    per_size = [s for s in chosen if s.per_size]
    results: dict[str, Any] = {"sizes": [], "sections": {}}
    if per_size:
        biggest = max(cfg.sizes)
        t0 = time.perf_counter()
        wl = workload.generate(biggest, cfg.seed)
        # Pods are generated one after another, so a smaller size is a prefix.
        starts: list[int] = []
        last = None
        for i, a in enumerate(wl.allocations):
            if a.pod_uid != last:
                starts.append(i)
                last = a.pod_uid
        starts.append(len(wl.allocations))
        log(f"workload generated in {time.perf_counter() - t0:.1f}s")
        ordered = sorted(cfg.sizes)
        small: tuple[int, str] | None = None
        for n in ordered:
            allocs = wl.allocations[: starts[n]]
            size_run = SizeRun(
                cfg,
                workdir,
                n,
                allocs,
                workload.registered_for(allocs),
                log,
                small if n == ordered[-1] and len(ordered) > 1 else None,
            )
            results["sizes"].append(size_run.run(names))
            if n == ordered[0]:
                small = (n, size_run.small_copy)
            gc.collect()
        if small is not None:
            _remove_db(small[1])
        del wl
    ctx = RunContext(cfg, workdir, log)
    for section in chosen:
        if not section.per_size:
            log(f"  {section.name}")
            out = section.run(ctx)
            if section.name == "fixture":
                results["fixture"] = out
            else:
                results["sections"][section.name] = out
    return results
