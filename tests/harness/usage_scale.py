"""A year of a 1,000-pod node's device history, for the usage figures: every pod slot runs
pods back to back (lifetimes from 6 hours to two weeks, fixed by the seed), each holding one
GPU; its container exits (runtime evidence) a while before kubelet drops the entry at the next
allocation; the pod-log directory names are read every 6 hours (no pod lives less). Built
through the store's own calls with the history's clock set to each event's time, so the chain
and every index are the real ones. ``build`` returns the device-seconds per namespace the
intervals must add up to.

With ``replicas``, each slot holds a time-sliced replica of a shared resource instead
(``replicas`` slots per card), and the plugin re-registers every week, alternating between
``replicas`` and twice as many per card: a pod counts the share of the registration in force
when it started."""

from __future__ import annotations

import heapq
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from podstore import PodStore
from podstore.checkpoint import PodName
from podstore.storage import events

START = datetime(2025, 1, 1, tzinfo=UTC)
YEAR = 365 * 86400
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
REGISTER_EVERY = 7 * 86400.0
NAMES_EVERY = 6 * 3600.0
LIFETIMES = (6 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)


def ts(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat(timespec="microseconds")[:-6] + "Z"


def _registration(slots: int, replicas: int, per_card: int) -> dict[str, list[str] | None]:
    return {SHARED: [f"GPU-{c}::{r}" for c in range(slots // replicas) for r in range(per_card)]}


def build(
    db: Path, slots: int = 1000, seconds: int = YEAR, seed: int = 7, replicas: int = 0
) -> dict[str, float]:
    """Write the history into ``db``; returns device-seconds per namespace (the truth)."""
    rng = random.Random(seed)
    truth: dict[str, float] = {}
    # (time, order, what, slot, pod, exit time)
    queue: list[tuple[float, int, str, int, str, float]] = []
    order = 0
    for slot in range(slots):
        heapq.heappush(queue, (rng.uniform(0, 3600), order, "start", slot, "", 0.0))
        order += 1
    heapq.heappush(queue, (0.0, -1, "names", 0, "", 0.0))
    if replicas:
        # Before the starts at the same instant (each registration is in force from its time).
        heapq.heappush(queue, (0.0, -2, "register", 0, "", 0.0))
    share = 1.0
    registrations = 0
    live: dict[str, PodName] = {}
    clock = [START]
    saved = events.utcnow
    events.utcnow = lambda: clock[0]
    n = 0
    try:
        with PodStore.open(db) as store:
            batch = store.transaction()
            batch.__enter__()
            while queue:
                when, _o, what, slot, pod, exit_at = heapq.heappop(queue)
                clock[0] = START + timedelta(seconds=when)
                if what == "register":
                    per_card = replicas * (1 + registrations % 2)
                    store.set_registered_devices(_registration(slots, replicas, per_card))
                    share = 1.0 / per_card
                    registrations += 1
                    if when + REGISTER_EVERY < seconds:
                        heapq.heappush(queue, (when + REGISTER_EVERY, -2, "register", 0, "", 0.0))
                elif what == "names":
                    store.set_pod_names(live)
                    if when < seconds:  # and once at the end, for the pods started last
                        later = min(when + NAMES_EVERY, float(seconds))
                        heapq.heappush(queue, (later, -1, "names", 0, "", 0.0))
                elif what == "start":
                    if when >= seconds:
                        continue
                    pod = f"pod-{slot}-{n}"
                    n += 1
                    life = rng.choice(LIFETIMES) * rng.uniform(1.0, 2.0)
                    if replicas:
                        device = f"GPU-{slot // replicas}::{slot % replicas}"
                        store.insert(pod, "main", SHARED, {slot % 2: [device]}, b"")
                    else:
                        store.insert(pod, "main", GPU, {slot % 2: [f"GPU-{slot}"]}, b"")
                    exit_at = when + life
                    # kubelet drops the entry at the slot's next allocation, a little later.
                    drop = exit_at + rng.uniform(10, 600)
                    heapq.heappush(queue, (exit_at, order, "exit", slot, pod, exit_at))
                    heapq.heappush(queue, (drop, order + 1, "drop", slot, pod, exit_at))
                    order += 2
                    namespace = f"team-{slot % 10}"
                    live[pod] = PodName(namespace, pod)
                    end = min(exit_at, float(seconds))
                    truth[namespace] = truth.get(namespace, 0.0) + (end - when) * share
                elif what == "exit":
                    store.record_ends([(pod, "main", "runtime", ts(exit_at))])
                else:
                    store.delete([pod])
                    live.pop(pod, None)
                    heapq.heappush(queue, (when, order, "start", slot, "", 0.0))
                    order += 1
                if order % 2000 == 0:
                    batch.__exit__(None, None, None)
                    batch = store.transaction()
                    batch.__enter__()
            batch.__exit__(None, None, None)
    finally:
        events.utcnow = saved
    return truth
