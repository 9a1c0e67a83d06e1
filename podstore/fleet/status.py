"""How shipping stands for a process that ships again and again (``watch --ship-to``): one
:class:`ShippingStatus` per store, filled by every ``ship(..., status=...)`` call and read by
any thread through :meth:`~ShippingStatus.snapshot`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class ShippingFigures:
    """One consistent reading of a :class:`ShippingStatus`: the newest seq the fleet held
    after the last call that reached it, the node events it lacked then (None: unknown) and
    the age of the oldest, call counts (``refusals``: failures the server refused), wall-clock
    times of the latest success and failure, and the latest error (None after a success)."""

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
    """Thread-safe counters and gauges of one store's shipping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures = ShippingFigures(None, None, None, 0, 0, 0, None, None, None)

    def snapshot(self) -> ShippingFigures:
        with self._lock:
            return self._figures

    def succeeded(self, last_seq: int, lag_events: int | None, lag_seconds: float | None) -> None:
        with self._lock:
            f = self._figures
            self._figures = replace(
                f,
                last_seq=last_seq,
                lag_events=lag_events,
                lag_seconds=lag_seconds,
                successes=f.successes + 1,
                last_success=time.time(),
                last_error=None,
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
            self._figures = replace(
                f,
                last_seq=f.last_seq if last_seq is None else last_seq,
                lag_events=lag_events,
                lag_seconds=lag_seconds,
                failures=f.failures + 1,
                refusals=f.refusals + refused,
                last_failure=time.time(),
                last_error=error,
            )
