"""A random but reproducible podstore workload, its model, and the observed store state.

Operation ``i`` of a run is a pure function of ``(seed, i)``, so a writer subprocess and the
test that kills it generate the same operations without sending them over a pipe: the writer
only reports "began i" and "acknowledged i". The model is a plain dict whose insertion order
is podstore's entry order (api.md: a replacing insert keeps the position, delete and
re-insert moves the entry to the end).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podstore import ContainerAllocateResponse, PodDevicesEntry, PodStore

dumps_checkpoint: Callable[..., bytes] | None
try:  # the kubelet file format module; without it the workload leaves imports out
    from podstore.checkpoint import dumps_checkpoint
except ImportError:  # pragma: no cover
    dumps_checkpoint = None

PODS = [f"pod-{i:02d}" for i in range(24)]
CONTAINERS = ["c0", "c1", "c2"]
RESOURCES = ["example.com/gpu", "example.com/nic", "vendor.io/fpga"]
DEVICES = [f"dev-{i}" for i in range(32)]
NUMA = [-1, 0, 1, 2]

Devices = dict[int, list[str] | None] | None
Key = tuple[str, str, str]
# devices as comparable tuples: None, or ((numa, (ids...) | None), ...) sorted by numa
DevicesRepr = tuple[tuple[int, tuple[str, ...] | None], ...] | None
EntryRepr = tuple[str, str, str, DevicesRepr, bytes | None]
State = tuple[tuple[EntryRepr, ...], tuple[tuple[str, tuple[str, ...]], ...]]


class RollbackRequested(Exception):
    """Raised inside a transaction block the workload wants rolled back."""


@dataclass
class Op:
    """One public call (or one transaction block of calls)."""

    index: int
    kind: str  # insert | delete | txn | txn_fail | restore | registered | import
    args: dict[str, Any] = field(default_factory=dict)
    sub: list[Op] = field(default_factory=list)


def _devices(rng: random.Random) -> Devices:
    roll = rng.random()
    if roll < 0.05:
        return None
    if roll < 0.1:
        return {}
    out: dict[int, list[str] | None] = {}
    for node in rng.sample(NUMA, rng.randint(1, 3)):
        r = rng.random()
        if r < 0.05:
            out[node] = None
        elif r < 0.1:
            out[node] = []
        else:
            out[node] = rng.sample(DEVICES, rng.randint(1, 4))
    return out


def _response(rng: random.Random, tag: str) -> bytes:
    if rng.random() < 0.15:
        return b""
    msg = ContainerAllocateResponse()
    msg.envs["OP"] = tag
    for k in range(rng.randint(0, 3)):
        msg.envs[f"K{k}"] = "v" * rng.randint(0, 40)
    if rng.random() < 0.3:
        msg.annotations["a.example.com/op"] = tag
    if rng.random() < 0.3:
        d = msg.devices.add()
        d.host_path = f"/dev/x{tag}"
        d.container_path = "/dev/x"
        d.permissions = "rw"
    return msg.SerializeToString(deterministic=True)


def _insert(rng: random.Random, tag: str) -> Op:
    return Op(
        -1,
        "insert",
        {
            "pod": rng.choice(PODS),
            "container": rng.choice(CONTAINERS),
            "resource": rng.choice(RESOURCES),
            "devices": _devices(rng),
            "resp": _response(rng, tag),
        },
    )


def _delete(rng: random.Random) -> Op:
    pods = rng.sample(PODS, rng.randint(1, 3))
    if rng.random() < 0.2:
        pods.append("never-inserted")
    return Op(-1, "delete", {"pods": pods})


def _registered(rng: random.Random) -> Op:
    if rng.random() < 0.1:
        return Op(-1, "registered", {"mapping": None})
    mapping: dict[str, list[str] | None] = {}
    for res in rng.sample(RESOURCES, rng.randint(0, 3)):
        mapping[res] = None if rng.random() < 0.1 else rng.sample(DEVICES, rng.randint(0, 6))
    return Op(-1, "registered", {"mapping": mapping})


def make_op(seed: int, index: int) -> Op:
    """Operation ``index`` of the workload ``seed`` (deterministic)."""
    rng = random.Random(f"{seed}:{index}")
    roll = rng.random()
    tag = f"{seed}-{index}"
    if roll < 0.40:
        op = _insert(rng, tag)
    elif roll < 0.55:
        op = _delete(rng)
    elif roll < 0.62:
        op = _registered(rng)
    elif roll < 0.72:
        # kubelet's restore path; more than 64 entries goes through writes.write_many
        n = rng.choice([rng.randint(1, 10), rng.randint(65, 90)])
        entries = [_insert(rng, f"{tag}.{k}").args for k in range(n)]
        op = Op(-1, "restore", {"entries": entries})
    elif roll < 0.77 and dumps_checkpoint is not None:
        # a kubelet checkpoint file, imported (replacing everything, or merged)
        n = rng.choice([0, rng.randint(1, 12), rng.randint(40, 80)])
        entries = [_insert(rng, f"{tag}.{k}").args for k in range(n)]
        registered = _registered(rng).args["mapping"] or {}
        op = Op(
            -1,
            "import",
            {"entries": entries, "registered": registered, "merge": rng.random() < 0.5},
        )
    else:
        kind = "txn_fail" if roll > 0.95 else "txn"
        sub: list[Op] = []
        for k in range(rng.randint(2, 6)):
            r = rng.random()
            if r < 0.7:
                sub.append(_insert(rng, f"{tag}.{k}"))
            elif r < 0.9:
                sub.append(_delete(rng))
            else:
                sub.append(_registered(rng))
        op = Op(-1, kind, sub=sub)
    op.index = index
    return op


# ---- running an operation on a store ---------------------------------------------------------


def _call(store: PodStore, op: Op) -> None:
    a = op.args
    if op.kind == "insert":
        store.insert(a["pod"], a["container"], a["resource"], a["devices"], a["resp"])
    elif op.kind == "delete":
        store.delete(a["pods"])
    elif op.kind == "registered":
        store.set_registered_devices(a["mapping"])
    elif op.kind == "restore":
        store.from_checkpoint_data(
            [
                PodDevicesEntry(e["pod"], e["container"], e["resource"], e["devices"], e["resp"])
                for e in a["entries"]
            ]
        )
    elif op.kind == "import":
        assert dumps_checkpoint is not None
        data = dumps_checkpoint(
            [
                PodDevicesEntry(e["pod"], e["container"], e["resource"], e["devices"], e["resp"])
                for e in a["entries"]
            ],
            a["registered"],
        )
        path = f"{store.path}.import-{op.index}"
        with open(path, "wb") as fh:
            fh.write(data)
        store.import_checkpoint(path, merge=a["merge"])
        os.unlink(path)
    else:  # pragma: no cover - guarded by apply()
        raise ValueError(op.kind)


def apply(store: PodStore, op: Op) -> None:
    """Perform ``op`` on ``store``; a txn_fail block is rolled back (its error swallowed)."""
    if op.kind in ("txn", "txn_fail"):
        try:
            with store.transaction():
                for sub in op.sub:
                    _call(store, sub)
                if op.kind == "txn_fail":
                    raise RollbackRequested
        except RollbackRequested:
            pass
        return
    _call(store, op)


# ---- the model -------------------------------------------------------------------------------


def _devices_repr(devices: Mapping[int, Sequence[str] | None] | None) -> DevicesRepr:
    if devices is None:
        return None
    return tuple(
        (int(n), None if ids is None else tuple(ids)) for n, ids in sorted(devices.items())
    )


@dataclass
class Model:
    """The expected store contents after a sequence of acknowledged operations."""

    entries: dict[Key, tuple[DevicesRepr, bytes]] = field(default_factory=dict)
    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def copy(self) -> Model:
        return Model(dict(self.entries), dict(self.registered))

    def _one(self, op: Op) -> None:
        a = op.args
        if op.kind == "insert":
            self.entries[(a["pod"], a["container"], a["resource"])] = (
                _devices_repr(a["devices"]),
                a["resp"],
            )
        elif op.kind == "delete":
            gone = set(a["pods"])
            for key in [k for k in self.entries if k[0] in gone]:
                del self.entries[key]
        elif op.kind == "registered":
            mapping = a["mapping"] or {}
            self.registered = {r: tuple(ids or ()) for r, ids in mapping.items()}
        elif op.kind == "restore":
            for e in a["entries"]:
                self._one(Op(-1, "insert", e))
        elif op.kind == "import":
            if a["merge"]:
                for r, ids in a["registered"].items():
                    self.registered[r] = tuple(ids or ())
            else:
                self.entries = {}
                self.registered = {r: tuple(ids or ()) for r, ids in a["registered"].items()}
            for e in a["entries"]:
                self._one(Op(-1, "insert", e))
        else:  # pragma: no cover
            raise ValueError(op.kind)

    def apply(self, op: Op) -> None:
        if op.kind == "txn":
            for sub in op.sub:
                self._one(sub)
        elif op.kind != "txn_fail":
            self._one(op)

    def after(self, op: Op) -> Model:
        m = self.copy()
        m.apply(op)
        return m

    def state(self) -> State:
        return (
            tuple((k[0], k[1], k[2], d, r) for k, (d, r) in self.entries.items()),
            tuple(sorted(self.registered.items())),
        )


def store_state(store: PodStore) -> State:
    """What the store holds, in the model's shape (entries in position order)."""
    entries = tuple(
        (
            e.pod_uid,
            e.container_name,
            e.resource_name,
            _devices_repr(e.device_ids),
            e.alloc_resp,
        )
        for e in store.to_checkpoint_data()
    )
    registered = tuple(sorted((r, tuple(ids)) for r, ids in store.registered_devices().items()))
    return entries, registered


def describe_difference(got: State, want: State) -> str:
    """A short human description of how two states differ (for assertion messages)."""
    g = {e[:3]: e for e in got[0]}
    w = {e[:3]: e for e in want[0]}
    parts = []
    missing = [k for k in w if k not in g]
    extra = [k for k in g if k not in w]
    changed = [k for k in w if k in g and g[k] != w[k]]
    if missing:
        parts.append(f"missing {missing[:5]}")
    if extra:
        parts.append(f"unexpected {extra[:5]}")
    if changed:
        parts.append(f"different {changed[:5]}")
    if not parts and [e[:3] for e in got[0]] != [e[:3] for e in want[0]]:
        parts.append("entry order differs")
    if got[1] != want[1]:
        parts.append(f"registered {got[1]!r} != {want[1]!r}")
    return "; ".join(parts) or "equal"
