"""End evidence: the earliest sign that a holder let its devices go, recorded once as an ``end``
event in the hashed history (docs/sql.md, "v_allocation_intervals").

kubelet drops a finished pod's device-plugin entries only at its next allocation, so the
``delete`` alone overstates a holding. Evidence comes from the runtime (a container's
``finished_at``), the CPU and memory managers (the container left their file) and the pod-log
directory (the pod's directory went); the mechanisms' own events (``delete``, a DRA claim's
event) are the ``checkpoint`` and ``dra`` ends and need no ``end`` event.

An ``end`` is written for a holder's key (entry key, or pod and DRA claim) only when it ends a
holding sooner than anything recorded: a holding open now with no end yet, or one whose
recorded end (its own event or an earlier ``end``) is later than this evidence. So a later
evidence records nothing, an earlier one arriving late is recorded once, and a restarted watch
that sees the same evidence again finds it recorded.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podstore.errors import InvalidInputError
from podstore.storage import events
from podstore.storage.ops import END_SOURCES
from podstore.storage.sql import intervals as sql

#: The sources an ``end`` event may carry (the others are the mechanisms' own events).
RECORDED_SOURCES = tuple(s for s in END_SOURCES if s not in ("checkpoint", "dra"))


@dataclass(frozen=True, slots=True)
class Evidence:
    """One sign that a holder let go at ``at`` (a stored time); ``container`` None: the
    whole pod."""

    pod_uid: str
    container: str | None
    source: str
    at: str


@dataclass(frozen=True, slots=True)
class Holding:
    device: str
    start_seq: int
    start: str
    until: str | None  # the mechanism's own end (None: held now)


def holdings(history: Iterable[tuple[int, str, frozenset[str]]]) -> list[Holding]:
    """The holdings a key's events describe, in seq order, each with the devices held after
    it: a device is held from the first event listing it until the first that does not."""
    held: dict[str, tuple[int, str]] = {}
    out: list[Holding] = []
    for seq, ts, devices in history:
        for device in [d for d in held if d not in devices]:
            start_seq, start = held.pop(device)
            out.append(Holding(device, start_seq, start, ts))
        for device in sorted(devices):
            held.setdefault(device, (seq, ts))
    out.extend(Holding(d, s, t, None) for d, (s, t) in held.items())
    return out


def _ends_inside(h: Holding, ends: Sequence[tuple[int, str]]) -> list[str]:
    return [
        at
        for seq, at in ends
        if seq > h.start_seq and at >= h.start and (h.until is None or at < h.until)
    ]


def decide(hs: Sequence[Holding], ends: Sequence[tuple[int, str]], at: str) -> str | None:
    """The evidence time to record for a key, or None when nothing ends sooner by it.

    The holdings it can end are those open now and those whose span holds ``at``; an open
    one that began after ``at`` (the watch first saw it after the holder was gone) ends at
    its start.
    """
    targets = [h for h in hs if h.until is None or h.start <= at < h.until]
    if not targets:
        return None
    when = max(at, min(h.start for h in targets))
    for h in targets:
        if when < h.start:
            continue  # began after the evidence: not this holder's end
        if all(e > when for e in _ends_inside(h, ends)):
            return when
    return None


def _entry_keys(conn: sqlite3.Connection, ev: Evidence) -> list[tuple[str | None, str]]:
    if ev.container is None:
        rows = conn.execute(sql.ENTRY_KEYS_OF_POD, (ev.pod_uid,))
    else:
        rows = conn.execute(sql.ENTRY_KEYS_OF_CONTAINER, (ev.pod_uid, ev.container))
    return [(r[0], str(r[1])) for r in rows]


def _entry_holdings(
    conn: sqlite3.Connection, pod: str, container: str | None, resource: str
) -> list[Holding]:
    rows = conn.execute(sql.ENTRY_EVENTS, (pod, container, resource))
    return holdings(
        (
            int(seq),
            str(ts),
            frozenset()
            if op == "delete" or text is None
            else frozenset(d for ids in json.loads(text).values() for d in ids or ()),
        )
        for seq, ts, op, text in rows
    )


def _claim_holdings(conn: sqlite3.Connection, pod: str, claim_key: str) -> list[Holding]:
    def held(op: str, text: str | None) -> frozenset[str]:
        value = None if op == "dra-delete" or text is None else json.loads(text)
        if not isinstance(value, dict) or pod not in (value.get("pods") or ()):
            return frozenset()
        return frozenset(
            f"{driver}/{x['pool']}/{x['device']}"
            for driver, devs in (value.get("drivers") or {}).items()
            for x in devs or ()
        )

    rows = conn.execute(sql.CLAIM_EVENTS, (claim_key,))
    return holdings((int(seq), str(ts), held(op, text)) for seq, ts, op, text in rows)


def record(
    conn: sqlite3.Connection, evidence: Iterable[Evidence], stamp: events.Stamp | None = None
) -> tuple[int, events.Stamp]:
    """Append an ``end`` event for each holder the evidence ends sooner than recorded, inside
    the caller's transaction; returns how many and the next stamp.

    Raises InvalidInputError for a source an ``end`` may not carry.
    """
    pending = events.Pending()
    recorded: dict[tuple[str, str | None, str], list[tuple[int, str]]] = {}
    queued = 0
    for ev in sorted(evidence, key=lambda e: (e.at, e.pod_uid, e.container or "", e.source)):
        if ev.source not in RECORDED_SOURCES:
            raise InvalidInputError(
                f"end source must be one of {', '.join(RECORDED_SOURCES)}, not {ev.source!r}"
            )
        targets: list[tuple[tuple[str, str | None, str], list[Holding]]] = [
            ((ev.pod_uid, c, r), _entry_holdings(conn, ev.pod_uid, c, r))
            for c, r in _entry_keys(conn, ev)
        ]
        if ev.container is None:
            targets += [
                ((ev.pod_uid, None, str(claim)), _claim_holdings(conn, ev.pod_uid, str(claim)))
                for (claim,) in conn.execute(sql.CLAIMS_OF_POD, (ev.pod_uid,))
            ]
        for key, hs in targets:
            if key not in recorded:
                recorded[key] = [(int(s), str(a)) for s, a in conn.execute(sql.END_EVENTS, key)]
            when = decide(hs, recorded[key], ev.at)
            if when is None:
                continue
            payload = events.JSON.encode({"at": when, "source": ev.source})
            pending.node("end", key, payload)
            # Later than any seq written so far: it counts inside every holding it may end.
            recorded[key].append((1 << 62, when))
            queued += 1
    return queued, pending.write(conn, stamp)
