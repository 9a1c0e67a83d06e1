"""A synthetic fleet, generated straight into PostgreSQL with COPY: many stores' histories,
chained as nodes chain them (pure/chain.py), with the current state those histories end in.

Shipping 10,000,000 events through the shipping functions would take the better part of an
hour; this writes the same rows a shipper would leave (events with their hashes, the stores'
heads and counters, entries, device rows, double allocations, registered devices, pod-name
items, and the kept allocation intervals, computed once after the load as the upgrade that
added them computes them, every store marked caught up) in a few minutes, so
that the fleet questions and the ingest on top of them can be measured at scale
(bench/fleet.py) and checked at a bounded scale (tests/fleet/test_fleet_scale.py).

Each store is simulated from its own seeded generator (:func:`simulate`), so any one of them
can be simulated again to know the right answer for it. Times: store ``n``'s event ``seq`` is
at ``T0 + seq × STEP`` (plus ``n`` ms): 1,000 events span a month, as a node's history of a
month of pods would, every store's history spans the same days and an instant falls inside
all of them. Pods are named (``pod-name`` items, a namespace each) and half the deletes follow
a runtime ``end`` event, so the usage questions count real intervals.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from podstore.fleet.migrations.versions import f0009_kept_intervals as f0009
from podstore.pure import chain

T0 = datetime(2026, 11, 1, tzinfo=UTC)
#: Seconds between a store's events: 1,000 of them make a month and a day.
STEP = 2_700
GPU = "nvidia.com/gpu"
NAMESPACES = 20

Key = tuple[str, str, str]
#: (seq, ts, op, pod_uid, container, resource, device_ids, released, hash)
Event = tuple[int, str, str, str | None, str | None, str, str | None, str | None, bytes]


@dataclass(slots=True)
class Store:
    """One simulated store: identity, where its chain ends, and the state its history ends in."""

    n: int
    store_id: str
    node: str
    last_seq: int = 0
    head: bytes = b""
    entries: dict[Key, dict[int, list[str]]] = field(default_factory=dict)
    registered: dict[str, list[str]] = field(default_factory=dict)
    #: pod → (namespace, name, seq of its pod-name event)
    names: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    def holders(self) -> dict[tuple[str, str], set[str]]:
        """(resource, device) → the pods holding it now."""
        out: dict[tuple[str, str], set[str]] = {}
        for (pod, _container, resource), numa in self.entries.items():
            for ids in numa.values():
                for device in ids:
                    out.setdefault((resource, device), set()).add(pod)
        return out

    def doubles(self) -> dict[tuple[str, str], int]:
        return {k: len(v) for k, v in self.holders().items() if len(v) > 1}

    def device_rows(self) -> int:
        return sum(len(ids) for numa in self.entries.values() for ids in numa.values())


def ts_of(n: int, seq: int) -> str:
    return _stored(T0 + timedelta(seconds=seq * STEP, milliseconds=n % 1000))


def _stored(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


def namespace_of(pod: str) -> str:
    return f"team-{int(pod.rsplit('-', 1)[1]) % NAMESPACES:02d}" if pod[0] == "p" else "batch"


def _name_text(namespace: str, name: str) -> str:
    # The node's pod-name payload (storage/node/numa_and_names.py): namespace, then name.
    return f'{{"namespace":"{namespace}","name":"{name}"}}'


def device(n: int, k: int) -> str:
    return f"GPU-{n}-{k}"


def _numa_text(numa: dict[int, list[str]]) -> str:
    # The node's NUMA map text: compact JSON, keys in numeric order (storage/events.numa_json).
    return (
        "{"
        + ",".join(f'"{k}":[' + ",".join(f'"{d}"' for d in numa[k]) + "]" for k in sorted(numa))
        + "}"
    )


def _list_text(ids: list[str]) -> str:
    return "[" + ",".join(f'"{d}"' for d in ids) + "]"


def simulate(n: int, events: int) -> tuple[Store, Iterator[Event]]:
    """Store ``n`` with ``events`` events: its record (filled in as the iterator is consumed)
    and its events, chained from the genesis of its store_id. Inserts, replaces (moving a pod
    to a free device), deletes (half of them after a runtime ``end`` up to half an hour
    earlier), re-inserts, each pod's name when it first appears, now and then the registered
    devices again, and on every 50th store one pod given a device another pod holds (a double
    allocation)."""
    rng = random.Random(n * 7919 + 17)
    store = Store(n, str(uuid.UUID(int=rng.getrandbits(128), version=4)), f"gen-{n:05d}")
    return store, _events(store, events, rng)


def _events(store: Store, total: int, rng: random.Random) -> Iterator[Event]:
    n = store.n
    pods = max(4, total // 10)
    devices = [device(n, k) for k in range(pods + pods // 5 + 2)]
    held: dict[str, str] = {}  # pod -> device
    prev = chain.genesis(store.store_id)
    link = chain.link
    seq = 0
    rogue_at = total // 2 if n % 50 == 0 else -1

    def emit(
        op: str, pod: str | None, resource: str, ids: str | None, released: str | None
    ) -> Event:
        nonlocal prev, seq
        seq += 1
        ts = ts_of(n, seq)
        container = None if pod is None or op == "node-set" else "main"
        prev = link(prev, seq, ts, op, pod, container, resource, ids, released)
        return (seq, ts, op, pod, container, resource, ids, released, prev)

    def name(pod: str) -> Event:
        namespace = namespace_of(pod)
        store.names[pod] = (namespace, pod, seq + 1)
        return emit("node-set", pod, "pod-name", _name_text(namespace, pod), None)

    store.registered[GPU] = list(devices)
    yield emit("registered", None, GPU, _list_text(devices), None)
    for i in range(min(pods // 2, (total - 1) // 2)):
        pod = f"pod-{n}-{i}"
        yield name(pod)
        held[pod] = devices[i]
        numa = {i % 2: [devices[i]]}
        store.entries[(pod, "main", GPU)] = numa
        yield emit("insert", pod, GPU, _numa_text(numa), None)
    free = devices[len(held) :]
    gone: list[str] = []
    fresh = len(held)
    while seq < total:
        if seq >= rogue_at >= 0:
            # (a step may emit two events: a name and its insert, an end and its delete)
            rogue_at = -1
            # The victim's holder keeps it: the double allocation lasts to the end.
            pinned = next(iter(held))
            victim = held.pop(pinned)
            pod = f"rogue-{n}"
            numa = {0: [victim]}
            store.entries[(pod, "main", GPU)] = numa
            yield emit("insert", pod, GPU, _numa_text(numa), None)
            continue
        roll = rng.random()
        if roll < 0.005:
            yield emit("registered", None, GPU, _list_text(devices), None)
        elif roll >= 0.9 and fresh < pods and free and seq + 1 < total:
            pod = f"pod-{n}-{fresh}"
            fresh += 1
            yield name(pod)
            new = free.pop(rng.randrange(len(free)))
            held[pod] = new
            numa = {rng.randrange(2): [new]}
            store.entries[(pod, "main", GPU)] = numa
            yield emit("insert", pod, GPU, _numa_text(numa), None)
        elif roll >= 0.8 and gone and free:
            pod = gone.pop(rng.randrange(len(gone)))
            new = free.pop(rng.randrange(len(free)))
            held[pod] = new
            numa = {rng.randrange(2): [new]}
            store.entries[(pod, "main", GPU)] = numa
            yield emit("insert", pod, GPU, _numa_text(numa), None)
        elif 0.5 <= roll < 0.8 and len(held) > pods // 4:
            pod = rng.choice(list(held))
            if rng.random() < 0.5 and seq + 1 < total:
                # The runtime saw the container exit before kubelet's checkpoint let go.
                at = T0 + timedelta(seconds=(seq + 1) * STEP - rng.randrange(1, STEP // 2))
                payload = f'{{"at":"{_stored(at)}","source":"runtime"}}'
                yield emit("end", pod, GPU, payload, None)
            free.append(held.pop(pod))
            numa = store.entries.pop((pod, "main", GPU))
            gone.append(pod)
            yield emit("delete", pod, GPU, _numa_text(numa), None)
        else:
            pod = rng.choice(list(held))
            old = held[pod]
            new = free.pop(rng.randrange(len(free)))
            free.append(old)
            held[pod] = new
            numa = {rng.randrange(2): [new]}
            store.entries[(pod, "main", GPU)] = numa
            yield emit("replace", pod, GPU, _numa_text(numa), _list_text([old]))
    store.last_seq = seq
    store.head = prev


def owners_at(n: int, events: int, device_id: str, at: str) -> list[tuple[str, str, str]]:
    """Who held ``device_id`` in store ``n`` at the instant ``at`` (stored form): the
    simulation replayed up to it."""
    _store, history = simulate(n, events)
    state: dict[Key, set[str]] = {}
    for seq, ts, op, pod, container, resource, ids, _released, _hash in history:
        if ts > at:
            break
        if pod is None or container is None or op == "end":
            continue
        key = (pod, container, resource)
        if op == "delete":
            state.pop(key, None)
        else:
            assert ids is not None
            state[key] = {d for part in ids.split('"') for d in [part] if d.startswith("GPU-")}
        del seq
    return sorted(k for k, devs in state.items() if device_id in devs)


def usage_by_namespace(n: int, events: int, since: str, until: str) -> dict[str | None, float]:
    """Store ``n``'s device-seconds per namespace over ``[since, until)`` (stored forms): each
    holding from its insert or replace to its runtime ``end``, else to the key's next event,
    else open (counted to ``until``); clipped to the window."""
    _store, history = simulate(n, events)
    lo, hi = _parse(since), _parse(until)
    start: dict[str, datetime] = {}
    ended: dict[str, datetime] = {}
    out: dict[str | None, float] = {}

    def close(pod: str, at: datetime) -> None:
        began = start.pop(pod)
        stop = min(ended.pop(pod, at), at)
        if began < hi and stop > lo:
            seconds = (min(stop, hi) - max(began, lo)).total_seconds()
            namespace = None if pod.startswith("rogue-") else namespace_of(pod)
            out[namespace] = out.get(namespace, 0.0) + seconds

    for _seq, ts, op, pod, container, _resource, ids, _released, _hash in history:
        if pod is None or container is None:
            continue
        at = _parse(ts)
        if op == "end":
            assert ids is not None
            ended[pod] = _parse(ids.split('"')[3])
            continue
        if pod in start:
            close(pod, at)
        ended.pop(pod, None)
        if op != "delete":
            start[pod] = at
    for pod in list(start):
        close(pod, hi)
    return out


def _parse(stored: str) -> datetime:
    return datetime.fromisoformat(stored.replace("Z", "+00:00"))


# ---- loading with COPY ---------------------------------------------------------------------

_EVENT_COLUMNS = (
    "store_id, seq, ts, op, pod_uid, container, resource, device_ids, devices, "
    "device_ids_text, released, hash"
)


def _copy_text(value: str | None) -> str:
    # Our values hold no tab, newline or backslash: only NULL needs spelling out.
    return "\\N" if value is None else value


def _devices_array(pod: str | None, ids: str | None) -> str:
    if ids is None:
        return "{}"
    found = sorted({part for part in ids.split('"') if part.startswith("GPU-")})
    return "{" + ",".join(found) + "}"


def _load_worker(args: tuple[str, list[int], int]) -> list[Store]:
    """COPY the events of stores ``ns`` (one transaction); returns their records."""
    import psycopg

    libpq, ns, per_store = args
    stores: list[Store] = []
    with psycopg.connect(libpq) as conn:
        conn.execute("SET synchronous_commit = off")
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY fleet_events ({_EVENT_COLUMNS}) FROM STDIN") as copy,
        ):
            for n in ns:
                store, history = simulate(n, per_store)
                sid = store.store_id
                lines = []
                for seq, ts, op, pod, container, resource, ids, released, digest in history:
                    lines.append(
                        f"{sid}\t{seq}\t{ts}\t{op}\t{_copy_text(pod)}\t{_copy_text(container)}\t"
                        f"{resource}\t{_copy_text(ids)}\t{_devices_array(pod, ids)}\t"
                        f"{_copy_text(ids)}\t{_copy_text(released)}\t\\\\x{digest.hex()}\n"
                    )
                copy.write("".join(lines))
                stores.append(store)
    return stores


def _state_lines(stores: list[Store]) -> dict[str, list[str]]:
    now = datetime.now(UTC).isoformat()
    out: dict[str, list[str]] = {
        k: [] for k in ("stores", "entries", "allocations", "doubles", "registered", "items")
    }
    for s in stores:
        rows = s.device_rows()
        doubles = s.doubles()
        out["stores"].append(
            f"{s.store_id}\t{s.node}\t{s.last_seq}\t{now}\t{now}\t\\\\x{s.head.hex()}\t"
            f"{s.last_seq}\t{len(s.entries)}\t{rows}\t0\t0\n"
        )
        for (pod, container, resource), numa in s.entries.items():
            out["entries"].append(
                f"{s.store_id}\t{pod}\t{container}\t{resource}\t{_numa_text(numa)}\t{s.last_seq}\n"
            )
            for numa_node, ids in numa.items():
                for position, dev in enumerate(ids):
                    out["allocations"].append(
                        f"{s.store_id}\t{pod}\t{container}\t{resource}\t{s.last_seq}\t"
                        f"{numa_node}\t{position}\t{dev}\n"
                    )
        for (resource, dev), count in doubles.items():
            out["doubles"].append(f"{s.store_id}\t{resource}\t{dev}\t{count}\n")
        for resource, ids in s.registered.items():
            out["registered"].append(f"{s.store_id}\t{resource}\t{_list_text(ids)}\n")
        for pod, (namespace, name, seq) in s.names.items():
            # The item's key as the shipping functions write it (jsonb's text of the array).
            out["items"].append(
                f'{s.store_id}\t["{pod}", null, "pod-name"]\tnode\t{pod}\t\\N\tpod-name\t'
                f"{_name_text(namespace, name)}\t{{}}\t{seq}\n"
            )
    return out


_STATE_COPIES = {
    "stores": "COPY fleet_stores (store_id, node, last_seq, last_shipped_at, first_shipped_at, "
    "head_hash, events, entries, device_rows, snapshots, refusals) FROM STDIN",
    "entries": "COPY fleet_entries (store_id, pod_uid, container, resource, device_ids, seq) "
    "FROM STDIN",
    "allocations": "COPY fleet_allocations (store_id, pod_uid, container, resource, seq, "
    "numa_node, position, device_id) FROM STDIN",
    "doubles": "COPY fleet_double_allocated (store_id, resource, device_id, pod_count) FROM STDIN",
    "registered": "COPY fleet_registered (store_id, resource, device_ids) FROM STDIN",
    "items": "COPY fleet_node_items (store_id, item_key, kind, pod_uid, container, resource, "
    "value, devices, seq) FROM STDIN",
}

# The fleet_events indexes, dropped for the load and built once after it (a b-tree built from
# sorted input costs a fraction of 10,000,000 random inserts).
_EVENT_INDEXES = {
    "pk_fleet_events": "ALTER TABLE fleet_events ADD CONSTRAINT pk_fleet_events "
    "PRIMARY KEY (store_id, seq)",
    "ix_fleet_events_key": "CREATE INDEX ix_fleet_events_key ON fleet_events "
    "(store_id, pod_uid, container, resource, seq)",
    "ix_fleet_events_devices": "CREATE INDEX ix_fleet_events_devices ON fleet_events "
    "USING gin (devices)",
}


@dataclass(frozen=True, slots=True)
class Loaded:
    stores: list[Store]
    events: int
    load_s: float
    index_s: float
    #: The kept intervals' fill from the whole history (as revision f0009's upgrade fills).
    fill_s: float


def load(
    url: str,
    stores: int,
    events_per_store: int,
    *,
    workers: int = 2,
    first: int = 0,
    log: Callable[[str], None] | None = None,
) -> Loaded:
    """Generate stores ``first`` … ``first + stores - 1`` with ``events_per_store`` events
    each into the (empty) fleet database at ``url``, in ``workers`` processes; then build the
    events' indexes and analyse. Returns the stores' records and the times taken."""
    import psycopg

    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("ALTER TABLE fleet_events DROP CONSTRAINT pk_fleet_events")
        conn.execute("DROP INDEX ix_fleet_events_key")
        conn.execute("DROP INDEX ix_fleet_events_devices")
    ns = list(range(first, first + stores))
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        parts = pool.map(
            _load_worker, [(libpq, ns[i::workers], events_per_store) for i in range(workers)]
        )
    records = sorted((s for part in parts for s in part), key=lambda s: s.n)
    with psycopg.connect(libpq) as conn:
        lines = _state_lines(records)
        with conn.cursor() as cur:
            for name, statement in _STATE_COPIES.items():
                with cur.copy(statement) as copy:
                    for start in range(0, len(lines[name]), 10_000):
                        copy.write("".join(lines[name][start : start + 10_000]))
        conn.commit()
    load_s = time.perf_counter() - t0
    if log is not None:
        total = stores * events_per_store
        log(f"fleetgen: {stores:,} stores, {total:,} events loaded in {load_s:.0f}s")
    t0 = time.perf_counter()
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        for statement in _EVENT_INDEXES.values():
            conn.execute(statement)
        conn.execute("ANALYZE")
    index_s = time.perf_counter() - t0
    # The kept intervals, computed once from the history held and every store marked caught
    # up, as the upgrade that added them does (timed apart: the bench reports the fill).
    t0 = time.perf_counter()
    with psycopg.connect(libpq) as conn:
        conn.execute(f0009.MARK_ALL)
        conn.execute(f0009.FILL)
        conn.commit()
    fill_s = time.perf_counter() - t0
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    if log is not None:
        log(f"fleetgen: indexes built in {index_s:.0f}s, intervals kept in {fill_s:.0f}s")
    return Loaded(records, sum(s.last_seq for s in records), load_s, index_s, fill_s)


def digest(stores: list[Store]) -> str:
    """A short digest of what was generated (the same for the same arguments)."""
    h = hashlib.sha256()
    for s in stores:
        h.update(s.head)
    return h.hexdigest()[:12]
