"""``/healthz`` and ``/readyz`` of ``podstore watch --metrics-addr``, answered from what each
follower's loop records (a :class:`Pulse`), never from the store (the rules: docs/watch.md,
"Health checks"). A bad checkpoint or a fleet that is down is no liveness problem: a restart
would not mend it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Default of ``watch --stuck-after``: how long a follower may be stuck before /healthz says so.
STUCK_AFTER = 300.0


class Pulse:
    """What a follower's loop tells the health endpoints. Written by the follower's thread,
    read by the HTTP server's (each field is one assignment, so it is read whole)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.loop_at = self.started
        self.sync_since: float | None = None
        self.last_result: str | None = None
        self.last_good_at: float | None = None
        # When the current run of store errors began: an idle node's last good sync may be
        # hours old, and one busy error must not count as hours of errors.
        self.errors_since: float | None = None
        self.first_ok = False
        self.ended = False

    def running(self) -> None:
        self.ended = False
        self.loop_at = self.clock()

    def beat(self) -> None:
        self.loop_at = self.clock()

    def sync_started(self) -> None:
        self.sync_since = self.loop_at = self.clock()

    def sync_ended(self, result: str) -> None:
        now = self.clock()
        self.last_result = result
        if result in ("applied", "unchanged"):
            self.last_good_at = now
        if result != "error":
            self.first_ok = True
            self.errors_since = None
        elif self.errors_since is None:
            self.errors_since = self.sync_since if self.sync_since is not None else now
        self.sync_since = None
        self.loop_at = now

    def nothing_to_sync(self) -> None:
        """The file is absent since the start: no sync to wait for (not a result either)."""
        self.first_ok = True
        self.loop_at = self.clock()

    def stopped(self) -> None:
        """The loop ended (called in a ``finally``: an exception ends it too)."""
        self.ended = True


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode() + b"\n"


@dataclass
class Watched:
    name: str
    pulse: Pulse
    interval: float


class Health:
    """The answers of ``/healthz`` and ``/readyz`` over the followers registered."""

    def __init__(self, *, stuck_after: float = STUCK_AFTER) -> None:
        if not stuck_after > 0:
            raise ValueError("stuck_after must be positive")
        self.stuck_after = stuck_after
        self.followers: list[Watched] = []
        self.stopping = False

    def watch(self, name: str, pulse: Pulse, interval: float) -> None:
        self.followers.append(Watched(name, pulse, interval))

    def _problems(self, w: Watched, now: float) -> list[str]:
        p = w.pulse
        if p.ended and not self.stopping:
            return [f"{w.name}: the follower stopped"]
        out = []
        if p.sync_since is not None and now - p.sync_since > self.stuck_after:
            out.append(f"{w.name}: a sync has run for {now - p.sync_since:.0f} s")
        elif p.sync_since is None and now - p.loop_at > w.interval + self.stuck_after:
            out.append(f"{w.name}: its loop has not come round for {now - p.loop_at:.0f} s")
        if p.last_result == "error":
            since = p.errors_since if p.errors_since is not None else p.started
            if now - since > self.stuck_after:
                out.append(f"{w.name}: store errors for {now - since:.0f} s")
        return out

    def _state(self, w: Watched, now: float) -> dict[str, Any]:
        p = w.pulse
        return {
            "checkpoint": w.name,
            "last_result": p.last_result,
            "last_good_sync_age_seconds": (
                None if p.last_good_at is None else round(now - p.last_good_at, 3)
            ),
            "sync_running_seconds": (
                None if p.sync_since is None else round(now - p.sync_since, 3)
            ),
            "alive": not p.ended,
        }

    def live(self) -> Answer:
        problems: list[str] = []
        states = []
        for w in self.followers:
            now = w.pulse.clock()
            problems += self._problems(w, now)
            states.append(self._state(w, now))
        return Answer(
            503 if problems else 200,
            {
                "status": "unhealthy" if problems else "ok",
                "problems": problems,
                "followers": states,
            },
        )

    def ready(self) -> Answer:
        problems = []
        if self.stopping:
            problems.append("stopping: the store is about to close")
        for w in self.followers:
            if not w.pulse.first_ok:
                problems.append(f"{w.name}: no first sync yet")
        return Answer(
            503 if problems else 200,
            {"status": "not ready" if problems else "ready", "problems": problems},
        )
