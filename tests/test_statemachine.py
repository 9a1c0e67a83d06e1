"""Random sequences of writes applied to a PodStore and to the reference model must agree.

Small alphabets make collisions (replacing inserts, deletes of existing pods, conflicting run
options, shared device IDs) the common case. After every step every query is compared
(refmodel.assert_agrees); the store is also closed and reopened mid-sequence.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from harness.refmodel import Alphabet, RefModel, assert_agrees, resp
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from podstore import InvalidInputError, PodDevicesEntry, PodStore

PODS = ["p0", "p1", "p2"]
CONTAINERS = ["c0", "c1"]
# "R1" < "r0" < "vendor.com/ü" in byte order: run options must follow it.
RESOURCES = ["r0", "R1", "vendor.com/ü"]
DEVICES = ["d0", "d1", "d2", "", "n\x00ul"]
NUMA = [-1, 0, 1]
ALPHABET = Alphabet([*PODS, "px"], CONTAINERS, RESOURCES, [*DEVICES, "zz"])

MESSAGES = [
    resp(envs={"E": "a", "A": "1"}, cdi=["v.com/c=a"]),
    resp(
        envs={"E": "b"},
        devices=[("/dev/x", "/h/1", "rw")],
        mounts=[("/m", "/h", True)],
        annotations={"k": "1"},
        cdi=["v.com/c=b", "v.com/c=a"],
    ),
    resp(
        devices=[("/dev/x", "/h/2", "r"), ("/dev/y", "/h/3", "")],
        mounts=[("/m", "/h2", False)],
        annotations={"k": "2", "cdi.k8s.io/devicemanager_p0-c0": "plugin"},
        cdi=["bad"],
    ),
]
# Envs B=2 then A=1: valid, but not in the order podstore would serialize.
NON_CANONICAL = bytes.fromhex("0a060a01421201320a060a0141120131")
RAW = [b"", NON_CANONICAL, *(m.SerializeToString() for m in MESSAGES)]
UNDECODABLE = b"\xff\xff"

Op = tuple[Any, ...]

pods = st.sampled_from(PODS)
containers = st.sampled_from(CONTAINERS)
resources = st.sampled_from(RESOURCES)
device_lists = st.one_of(
    st.none(),
    st.lists(st.sampled_from(DEVICES), max_size=3),
    st.frozensets(st.sampled_from(DEVICES), max_size=2),
)
per_numa = st.one_of(st.none(), st.dictionaries(st.sampled_from(NUMA), device_lists, max_size=3))
insert_resps = st.sampled_from([None, *MESSAGES, *RAW])
entry_resps = st.sampled_from([None, UNDECODABLE, *RAW])
entries = st.builds(PodDevicesEntry, pods, containers, resources, per_numa, entry_resps)
registered = st.one_of(
    st.none(),
    st.dictionaries(
        resources, st.one_of(st.none(), st.lists(st.sampled_from(DEVICES), max_size=3)), max_size=3
    ),
)
ops: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("insert"), pods, containers, resources, per_numa, insert_resps),
    st.tuples(st.just("delete"), st.lists(st.sampled_from([*PODS, "px"]), max_size=3)),
    st.tuples(st.just("restore"), st.lists(entries, max_size=4)),
    st.tuples(st.just("registered"), registered),
)


def apply(target: PodStore | RefModel, op: Op) -> None:
    kind, *args = op
    if kind == "insert":
        target.insert(*args)
    elif kind == "delete":
        target.delete(args[0])
    elif kind == "restore":
        target.from_checkpoint_data(args[0])
    elif kind == "registered":
        target.set_registered_devices(args[0])
    else:  # pragma: no cover
        raise AssertionError(kind)


def bulk_entries(seed: int, count: int) -> list[PodDevicesEntry]:
    """Many entries (enough for the bulk writer) drawn over the same small alphabets."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        devices: dict[int, list[str] | None] | None = None
        if rng.random() < 0.9:
            devices = {
                n: rng.sample(DEVICES, rng.randrange(3)) for n in rng.sample(NUMA, rng.randrange(3))
            }
        out.append(
            PodDevicesEntry(
                rng.choice(PODS),
                rng.choice(CONTAINERS),
                rng.choice(RESOURCES),
                devices,
                rng.choice([None, UNDECODABLE, *RAW]),
            )
        )
    return out


class Abort(Exception):
    """Raised inside a transaction block to make it roll back."""


class PodStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="podstore-sm-"))
        self.path = self.dir / "store.db"
        self.store = PodStore.open(self.path)
        self.model = RefModel()

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(op=ops)
    def single(self, op: Op) -> None:
        apply(self.store, op)
        apply(self.model, op)

    @rule(
        pod=pods,
        devices=per_numa,
        bad=st.sampled_from(
            [
                ("alloc_resp", UNDECODABLE),
                ("devices", {0: "d0"}),
                ("devices", {"0": ["d0"]}),
                ("devices", {2**63: ["d0"]}),
                ("pod_uid", 7),
            ]
        ),
    )
    def refused_insert(self, pod: str, devices: Any, bad: tuple[str, Any]) -> None:
        args: dict[str, Any] = {
            "pod_uid": pod,
            "container_name": "c0",
            "resource_name": "r0",
            "devices": devices,
            "alloc_resp": b"",
        }
        args[bad[0]] = bad[1]
        with pytest.raises(InvalidInputError, match=bad[0]):
            self.store.insert(**args)

    @rule(head=st.lists(entries, max_size=4), seed=st.integers(0, 2**32 - 1))
    def bulk_restore(self, head: list[PodDevicesEntry], seed: int) -> None:
        batch = head + bulk_entries(seed, 66)
        self.store.from_checkpoint_data(batch)
        self.model.from_checkpoint_data(batch)

    @rule(block=st.lists(ops, min_size=1, max_size=5), fail_at=st.none() | st.integers(0, 5))
    def transaction(self, block: list[Op], fail_at: int | None) -> None:
        after = self.model.copy()
        try:
            with self.store.transaction():
                for i, op in enumerate(block):
                    if i == fail_at:
                        raise Abort
                    apply(self.store, op)
                    apply(after, op)
                if fail_at is not None and fail_at >= len(block):
                    raise Abort
        except Abort:
            return
        self.model = after

    @rule(
        before=st.lists(ops, max_size=2),
        inner=st.lists(ops, min_size=1, max_size=3),
        inner_fails=st.booleans(),
        after=st.lists(ops, max_size=2),
    )
    def nested_transaction(
        self, before: list[Op], inner: list[Op], inner_fails: bool, after: list[Op]
    ) -> None:
        with self.store.transaction():
            for op in before:
                apply(self.store, op)
                apply(self.model, op)
            try:
                with self.store.transaction():
                    staged = self.model.copy()
                    for op in inner:
                        apply(self.store, op)
                        apply(staged, op)
                    if inner_fails:
                        raise Abort
            except Abort:
                pass
            else:
                self.model = staged
            # Inside the block every query already answers with the uncommitted state.
            assert_agrees(self.store, self.model, ALPHABET)
            for op in after:
                apply(self.store, op)
                apply(self.model, op)

    @rule(ok=ops)
    def refused_call_inside_transaction(self, ok: Op) -> None:
        with self.store.transaction():
            apply(self.store, ok)
            apply(self.model, ok)
            bad: list[Any] = [PodDevicesEntry("p0", "c0", "r0", {0: ["x"]}, b""), "not an entry"]
            with pytest.raises(InvalidInputError):
                self.store.from_checkpoint_data(bad)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = PodStore.open(self.path)

    @invariant()
    def agrees(self) -> None:
        assert_agrees(self.store, self.model, ALPHABET)


# The loaded profile (conftest) decides the example count; 20 steps keep one run short.
PodStoreMachine.TestCase.settings = settings(settings(), stateful_step_count=20)
TestPodStoreMachine = PodStoreMachine.TestCase
