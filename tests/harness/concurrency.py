"""Writers and readers for the concurrency harness (processes and threads).

Every write is a group with an invariant a reader can check from a single call:

- a writer's own pod ``w{W}-p{J}`` always holds 6 entries (3 containers x 2 resources), all
  stamped with the same generation: the response's ``GEN`` env and every device ID carry it.
  New pods, rewrites and deletes each touch all 6 entries in one transaction, so a reader that
  sees 1–5 entries, or two generations in one pod, saw a half-applied call.
- shared pods ``shared-{K}`` get one container per writer (``w{W}``), each entry a single
  insert stamped consistently; the final state must hold each writer's last value.

Run as a script: ``concurrency.py writer W SEED OPS DB`` or ``concurrency.py reader R DB STOP
[readonly]``; it prints one JSON line with its results and exits 0, or prints the error and
exits 1.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from podstore import ContainerAllocateResponse, InvalidInputError, PodStore, SchemaError

CONTAINERS = ("c0", "c1", "c2")
RESOURCES = ("example.com/gpu", "example.com/nic")
SHARED_PODS = 4

Expected = dict[str, list[Any]]  # "pod|container|resource" -> [devices, GEN]


def _resp(gen: str) -> bytes:
    msg = ContainerAllocateResponse()
    msg.envs["GEN"] = gen
    return msg.SerializeToString(deterministic=True)


def _gen_of(resp: bytes | None) -> str | None:
    if resp is None:
        return None
    msg = ContainerAllocateResponse()
    msg.ParseFromString(resp)
    return msg.envs.get("GEN")


def _devices(pod: str, container: str, resource: str, gen: str) -> dict[int, list[str]]:
    stem = f"{pod}/{container}/{resource}/{gen}"
    return {0: [f"{stem}#0", f"{stem}#1"], 1: [f"{stem}#2"]}


def run_writer(store: PodStore, writer: int, seed: int, ops: int) -> dict[str, Any]:
    """Perform ``ops`` grouped writes; return the entries this writer expects at the end."""
    rng = random.Random(seed * 1000 + writer)
    own: dict[str, str] = {}  # pod -> generation
    shared: Expected = {}
    next_pod = 0
    for k in range(ops):
        roll = rng.random()
        gen = f"g{writer}.{k}"
        if roll < 0.35 or not own:
            pod = f"w{writer}-p{next_pod}"
            next_pod += 1
            with store.transaction():
                for c in CONTAINERS:
                    for r in RESOURCES:
                        store.insert(pod, c, r, _devices(pod, c, r, gen), _resp(gen))
            own[pod] = gen
        elif roll < 0.6:
            pod = rng.choice(sorted(own))
            with store.transaction():
                for c in CONTAINERS:
                    for r in RESOURCES:
                        store.insert(pod, c, r, _devices(pod, c, r, gen), _resp(gen))
            own[pod] = gen
        elif roll < 0.75:
            pod = rng.choice(sorted(own))
            store.delete([pod])
            del own[pod]
        else:
            pod = f"shared-{rng.randrange(SHARED_PODS)}"
            c, r = f"w{writer}", rng.choice(RESOURCES)
            devices = _devices(pod, c, r, gen)
            store.insert(pod, c, r, devices, _resp(gen))
            shared[f"{pod}|{c}|{r}"] = [devices, gen]
    expected: Expected = dict(shared)
    for pod, gen in own.items():
        for c in CONTAINERS:
            for r in RESOURCES:
                expected[f"{pod}|{c}|{r}"] = [_devices(pod, c, r, gen), gen]
    return {"role": "writer", "id": writer, "ops": ops, "expected": expected}


def check_snapshot(store: PodStore) -> list[str]:
    """Violations visible in one to_checkpoint_data() snapshot."""
    problems: list[str] = []
    pods: dict[str, list[tuple[str, str, str | None, Any]]] = {}
    for e in store.to_checkpoint_data():
        pods.setdefault(e.pod_uid, []).append(
            (e.container_name, e.resource_name, _gen_of(e.alloc_resp), e.device_ids)
        )
    for pod, entries in pods.items():
        for c, r, gen, devices in entries:
            if gen is None or devices != _devices(pod, c, r, gen):
                problems.append(f"{pod}/{c}/{r}: devices {devices} do not match GEN {gen}")
        if pod.startswith("shared-"):
            continue
        gens = {gen for _, _, gen, _ in entries}
        if len(entries) != len(CONTAINERS) * len(RESOURCES) or len(gens) != 1:
            problems.append(f"{pod}: half-applied group: {len(entries)} entries, gens {gens}")
    return problems


def check_single_calls(store: PodStore, rng: random.Random) -> list[str]:
    """Violations visible in single read calls on a random pod."""
    problems: list[str] = []
    pods = sorted(store.pods())
    if not pods:
        return problems
    pod = rng.choice(pods)
    topo = store.get_container_devices(pod, "c0")
    if topo is not None and not pod.startswith("shared-"):
        gens = {d.rsplit("/", 1)[1].split("#")[0] for devs in topo.values() for d in devs}
        if len(gens) > 1:
            problems.append(f"{pod}/c0: get_container_devices mixes generations {gens}")
    union = store.pod_devices(pod, RESOURCES[0])
    if union and not pod.startswith("shared-"):
        gens = {d.rsplit("/", 1)[1].split("#")[0] for d in union}
        if len(gens) != 1 or len(union) != 3 * len(CONTAINERS):
            problems.append(f"{pod}: pod_devices saw {len(union)} devices, gens {gens}")
    return problems


def run_reader(store: PodStore, reader: int, should_stop: Callable[[], bool]) -> dict[str, Any]:
    rng = random.Random(reader)
    reads = 0
    problems: list[str] = []
    while not should_stop() or reads == 0:
        problems.extend(check_snapshot(store))
        problems.extend(check_single_calls(store, rng))
        reads += 1
    return {
        "role": "reader",
        "id": reader,
        "reads": reads,
        "problems": problems[:20],
        "violations": len(problems),
    }


#: What the processes here wait for a lock: they check consistency, not latency, and 8
#: processes on a loaded 2-core machine can hold the write lock past the 10 s default.
BUSY_TIMEOUT = 120.0


def _open_reader(db: str, readonly: bool, deadline: float) -> PodStore:
    """A read-only open of a file no writer has created or migrated yet is refused
    (InvalidInputError / SchemaError, as documented): a reader started together with the
    writers waits for the first of them."""
    while True:
        try:
            return PodStore.open(db, readonly=readonly, busy_timeout=BUSY_TIMEOUT)
        except (InvalidInputError, SchemaError):
            if not readonly or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def main(argv: list[str]) -> int:
    try:
        if argv[0] == "writer":
            _, w, seed, ops, db = argv
            with PodStore.open(db, busy_timeout=BUSY_TIMEOUT) as store:
                out = run_writer(store, int(w), int(seed), int(ops))
        else:
            _, r, db, stop, *flags = argv
            deadline = time.monotonic() + 300
            store = _open_reader(db, "readonly" in flags, deadline)
            with store:
                out = run_reader(
                    store,
                    int(r),
                    lambda: os.path.exists(stop) or time.monotonic() > deadline,
                )
                out["readonly"] = "readonly" in flags
    except BaseException as exc:
        print(
            json.dumps(
                {
                    "error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            )
        )
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
