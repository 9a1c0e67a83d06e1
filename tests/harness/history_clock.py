"""The history's clock set by a test (``events.utcnow``, the time events are stamped with), so
that every time in a store is exact: ``at(seconds)`` is the stored form of ``T0 + seconds``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from podstore.storage import events

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="microseconds")[:-6] + "Z"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def set(self, seconds: float) -> None:
        self.now = T0 + timedelta(seconds=seconds)


def install(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Stamp the history's events with a clock the test sets (from ``T0``)."""
    c = Clock()
    monkeypatch.setattr(events, "utcnow", lambda: c.now)
    return c
