"""``history(pod_uid=)`` and ``history --pod`` show the DRA manager's events of the claims a
pod uses: events keyed by claim, found through the pods the claim lists (in the event, or in
the claim's event before it, which is how a pod leaving a claim shows)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import podstore

from podstore import PodStore
from podstore.checkpoint import DRAClaim, DRADevice, DRAState


def _claim(uid: str, pods: set[str], devices: list[str]) -> DRAClaim:
    return DRAClaim(
        claim_uid=uid,
        claim_name=f"claim-{uid}",
        namespace="ml",
        pod_uids=frozenset(pods),
        driver_state={"gpu.example.com": [DRADevice("pool-a", d) for d in devices]},
    )


def _state(*claims: DRAClaim) -> DRAState:
    return DRAState(claims=list(claims))


def _ops(store: PodStore, pod: str) -> list[tuple[str, str]]:
    return [(e.op, e.resource_name) for e in store.history(pod_uid=pod)]


def test_a_pods_history_holds_its_claims_events_and_no_others(tmp_path: Path) -> None:
    db = tmp_path / "node.db"
    with PodStore.open(db) as store:
        store.insert("pod-a", "main", "vendor.com/nic", {0: ["NIC-1"]}, None)
        store.set_dra_state(
            _state(_claim("c1", {"pod-a"}, ["gpu-0"]), _claim("c2", {"pod-b"}, ["gpu-1"]))
        )
        # c1 gains pod-b and another device; c2 is untouched.
        store.set_dra_state(
            _state(
                _claim("c1", {"pod-a", "pod-b"}, ["gpu-0", "gpu-2"]),
                _claim("c2", {"pod-b"}, ["gpu-1"]),
            )
        )
        # pod-a leaves c1; then c1 goes away.
        store.set_dra_state(
            _state(_claim("c1", {"pod-b"}, ["gpu-0", "gpu-2"]), _claim("c2", {"pod-b"}, ["gpu-1"]))
        )
        store.set_dra_state(_state(_claim("c2", {"pod-b"}, ["gpu-1"])))

        assert _ops(store, "pod-a") == [
            ("insert", "vendor.com/nic"),
            ("dra-set", "dra:c1"),  # c1 created for pod-a
            ("dra-set", "dra:c1"),  # pod-b and gpu-2 added
            ("dra-set", "dra:c1"),  # pod-a dropped: the claim's previous event listed it
        ]
        # pod-b: c2 from the start, c1 from the event that added it until c1's deletion.
        assert _ops(store, "pod-b") == [
            ("dra-set", "dra:c2"),
            ("dra-set", "dra:c1"),
            ("dra-set", "dra:c1"),
            ("dra-delete", "dra:c1"),
        ]
        assert _ops(store, "pod-z") == []
        # A UID that only looks like JSON is compared as text, never parsed.
        assert _ops(store, '["pod-a"]') == []


def test_history_pod_on_the_command_line_shows_the_claims_events(tmp_path: Path) -> None:
    db = tmp_path / "node.db"
    with PodStore.open(db) as store:
        store.set_dra_state(_state(_claim("c9", {"pod-q"}, ["gpu-7"])))
    done = podstore("--db", str(db), "history", "--pod", "pod-q", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = json.loads(out)
    assert [(r["op"], r["resource"]) for r in rows] == [("dra-set", "dra:c9")]
