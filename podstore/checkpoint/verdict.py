"""What a kubelet release does when it starts on a checkpoint file: accept or refuse, the
format it reads it as, what it loses, and which releases accept it. Every rule comes from the
release table (podstore.checkpoint.releases); this module only looks the file up in it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podstore.checkpoint.releases import KNOWN, Release, Row, gate_on, has_manager, table
from podstore.errors import CheckpointError

#: The kubelet's words for a file it cannot decode or verify (docs/kubelet-releases.md §1).
_REFUSAL = {
    "cpu": "could not restore state from checkpoint: checkpoint is corrupted, please drain this "
    "node and delete the CPU manager checkpoint file before restarting Kubelet",
    "memory": "could not restore state from checkpoint: checkpoint is corrupted, please drain "
    "this node and delete the memory manager checkpoint file before restarting Kubelet",
    "dra": "failed to get checkpoint dra_manager_state: checkpoint is corrupted",
}
UNREADABLE = "all entries: file unreadable"
_POD_ENTRIES = re.compile(rb'"podEntries"\s*:\s*\{\s*"')


@dataclass(frozen=True)
class Verdict:
    """One file judged for one release."""

    kind: str
    kubelet_version: str
    verdict: str  # "accept" | "refuse"
    read_as: str | None
    drops: tuple[str, ...]
    accepted_by: tuple[str, ...]
    reason: str | None  # why refused, kubelet's words where known


@dataclass(frozen=True)
class _File:
    """What the release table needs to know of a file: its row key, or None if unreadable."""

    kind: str
    key: str | None
    has_pod_entries: bool
    error: str | None


def _examine(data: bytes, kind: str | None) -> _File:
    from podstore.checkpoint import detect_kind, read_node_checkpoint

    if kind is None:
        try:
            kind = detect_kind(data)
        except CheckpointError as exc:
            return _File("unknown", None, False, str(exc))
    try:
        cp = read_node_checkpoint(data, kind)
    except CheckpointError as exc:
        return _File(kind, None, False, str(exc))
    state: Any = cp.state
    key = cp.version
    if kind == "dra" and key == "v1" and b'"DriverState"' not in data:
        key = "v1 classic"
    if kind in ("cpu", "memory") and key in ("v1", "v2", "v3") and state.checksum == 0:
        key += " checksum 0"
    # A zero-checksum v2 is read as v1, which has no pod entries: the bytes still say so.
    pods = bool(getattr(state, "pod_entries", None)) or bool(_POD_ENTRIES.search(data))
    return _File(kind, key, pods, None)


def _one(
    f: _File, release: Release, gates: Mapping[str, bool]
) -> tuple[str, str | None, tuple[str, ...], str | None]:
    if release.minor is None:
        if f.key is None:
            return _unreadable(f)
        return "accept", f.key.split(" ")[0], (), None
    on = gate_on(gates)
    rows = [r for r in table() if r.kind == f.kind]
    for r in rows:
        if r.file == "none" and any(s.holds(release.minor, on) for s in r.accepted_by):
            return (
                "accept",
                None,
                (f"whole file: kubelet {release} has no {f.kind} manager; file ignored",),
                None,
            )
    if f.key is None:
        return _unreadable(f)
    hit: Row | None = next(
        (
            r
            for r in rows
            if r.file == f.key and any(s.holds(release.minor, on) for s in r.accepted_by)
        ),
        None,
    )
    if hit is None:
        if f.kind == "devices":
            return "accept", None, (UNREADABLE,), None
        return "refuse", None, (), _REFUSAL.get(f.kind, "checkpoint is corrupted")
    drops = tuple(d for d in hit.drops if d != "podEntries" or f.has_pod_entries)
    return "accept", hit.read_as, drops, None


def _unreadable(f: _File) -> tuple[str, str | None, tuple[str, ...], str | None]:
    if f.kind == "devices":
        return "accept", None, (UNREADABLE,), None
    return "refuse", None, (), f"{_REFUSAL.get(f.kind, 'checkpoint is corrupted')} ({f.error})"


def _ranges(minors: list[int]) -> tuple[str, ...]:
    out: list[str] = []
    start = prev = None
    for m in [*minors, None]:
        if m is not None and prev is not None and m == prev + 1:
            prev = m
            continue
        if start is not None and prev is not None:
            out.append(f"1.{start}" if start == prev else f"1.{start}-1.{prev}")
        start = prev = m
    return tuple(out)


def _reads(f: _File, release: Release, gates: Mapping[str, bool]) -> bool:
    verdict, _, drops, _ = _one(f, release, gates)
    return verdict == "accept" and UNREADABLE not in drops


def _judge(f: _File, release: Release, gates: Mapping[str, bool]) -> Verdict:
    verdict, read_as, drops, reason = _one(f, release, gates)
    # Releases that read the file: not those without a manager for the kind (they ignore it)
    # nor device managers that start empty on it.
    accepting = [
        r.minor
        for r in KNOWN
        if r.minor is not None and has_manager(f.kind, r) and _reads(f, r, gates)
    ]
    return Verdict(f.kind, str(release), verdict, read_as, drops, _ranges(accepting), reason)


def judge(data: bytes, kind: str, release: Release, gates: Mapping[str, bool]) -> Verdict:
    """What ``release`` (with ``gates``) does on starting with the checkpoint ``data``."""
    return _judge(_examine(data, kind), release, gates)


def judge_file(
    path: str | os.PathLike[str],
    release: Release,
    gates: Mapping[str, bool],
    kind: str | None = None,
) -> Verdict:
    """As :func:`judge` for a file; ``kind`` told by its content when None."""
    with open(path, "rb") as fh:
        data = fh.read()
    return _judge(_examine(data, kind), release, gates)
