"""A wake-up a signal handler may ring: a non-blocking self-pipe.

``threading.Event.set`` takes a lock, which a signal handler must not do (the main thread may
hold it when the signal lands); ``os.write`` to a pipe is async-signal-safe.
"""

from __future__ import annotations

import contextlib
import os
import select


class Wakeup:
    """Ring from any thread or a signal handler; wait from the main loop."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def ring(self) -> None:
        # A full pipe already holds a wake-up: nothing is lost by dropping this one.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._w, b"\0")

    def wait(self, timeout: float | None) -> bool:
        """Block until rung or ``timeout`` seconds pass; True when rung. Every ring before
        the return is consumed (many rings, one wake-up: a burst is coalesced)."""
        try:
            ready, _, _ = select.select([self._r], [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
            return False
        if not ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass
        return True

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
