"""How shipping stands, for a process that ships again and again (``podstore watch
--ship-to``): the lag behind the node, failures, the last seq shipped.

One :class:`ShippingStatus` per store and fleet database; ``ship(..., status=...)`` fills it
at the end of every call, successful or not, and any thread may read :meth:`snapshot` (a
metrics exporter, a log line) at any time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShippingFigures:
    """One consistent reading of a :class:`ShippingStatus`.

    ``last_seq``: the newest node seq the fleet database held after the last call that
    reached it (None before any did). ``lag_events``: node events it did not hold yet when
    the last call ended (None: unknown). ``lag_seconds``: how old the oldest of them was (0
    when none). ``successes``, ``failures``, ``refusals`` (failures the server refused:
    another node, a diverged chain, a retired store): calls so far. ``last_success``,
    ``last_failure``: wall-clock times (``time.time()``) of the latest ones. ``last_error``:
    the latest failure's message (URLs masked), None after a success.
    """

    last_seq: int | None
    lag_events: int | None
    lag_seconds: float | None
    successes: int
    failures: int
    refusals: int
    last_success: float | None
    last_failure: float | None
    last_error: str | None


class ShippingStatus:
    """Thread-safe counters and gauges of one store's shipping (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures = ShippingFigures(None, None, None, 0, 0, 0, None, None, None)

    def snapshot(self) -> ShippingFigures:
        with self._lock:
            return self._figures

    def succeeded(self, last_seq: int, lag_events: int | None, lag_seconds: float | None) -> None:
        with self._lock:
            f = self._figures
            self._figures = ShippingFigures(
                last_seq,
                lag_events,
                lag_seconds,
                f.successes + 1,
                f.failures,
                f.refusals,
                time.time(),
                f.last_failure,
                None,
            )

    def failed(
        self,
        error: str,
        lag_events: int | None,
        lag_seconds: float | None,
        *,
        refused: bool = False,
        last_seq: int | None = None,
    ) -> None:
        with self._lock:
            f = self._figures
            self._figures = ShippingFigures(
                f.last_seq if last_seq is None else last_seq,
                lag_events,
                lag_seconds,
                f.successes,
                f.failures + 1,
                f.refusals + refused,
                f.last_success,
                time.time(),
                error,
            )
