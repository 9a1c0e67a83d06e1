"""Running an after-sync hook (``watch --ship-to``) in a thread of its own, so that a slow or
unreachable server never blocks or skips a local sync. Notifications during a call collapse
into one (shipping sends everything the server lacks, so one call catches up).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from podstore.watch.failures import Backoff, ProblemLog

log = logging.getLogger("podstore")

#: What :func:`url_file_holds_url` reads of the file at most (a URL is one line).
MAX_PEEK = 64 << 10


class RetryingHook:
    """Calls ``hook()`` in a daemon thread each time it is notified, retrying a failure after
    ``first_delay`` doubling up to ``max_delay``; ``describe`` makes the line logged once per
    distinct problem (the shipper scrubs URLs there)."""

    def __init__(
        self,
        hook: Callable[[], object],
        *,
        name: str = "after-sync hook",
        first_delay: float = 1.0,
        max_delay: float = 300.0,
        describe: Callable[[BaseException], str] = str,
    ) -> None:
        self._backoff = Backoff(first_delay, max_delay)  # raises ValueError for bad delays
        self._problems = ProblemLog(log, cleared="%s works again")
        self._hook = hook
        self.name = name
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.describe = describe
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.calls = 0
        self.failures = 0
        self.successes = 0
        self.delays: list[float] = []  # each backoff waited, in order (for tests and logs)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def call(self) -> object:
        """Run the hook once in the caller's thread (``watch --once``); raises what it raises."""
        return self._hook()

    def notify(self) -> None:
        self._pending.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop after the call in progress; waits at most ``timeout`` for it (the thread is a
        daemon, so a call stuck on the network does not hold the process)."""
        self._stop.set()
        self._pending.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._pending.wait()
            if self._stop.is_set():
                return
            self._pending.clear()
            self.calls += 1
            try:
                self._hook()
            except Exception as exc:  # the hook is another package's code: never die of it
                self.failures += 1
                problem = self.describe(exc)
                self._problems.report(
                    problem,
                    "%s failed (retrying, backing off up to %.0f s): %s",
                    self.name,
                    self.max_delay,
                    problem,
                )
                self._pending.set()  # the work is still to do
                delay = self._backoff.next()
                self.delays.append(delay)
                # Only a stop cuts the wait short: new syncs do not make the server reachable.
                if self._stop.wait(delay):
                    return
            else:
                self.successes += 1
                self._problems.clear(self.name)
                self._backoff.reset()


def url_file_holds_url(path: str | os.PathLike[str] | None) -> bool:
    """Whether the ``--ship-to-file`` file is there with more than blank and ``#`` lines. A
    missing or empty one (an optional Secret) means no fleet: nothing shipped, nothing owed.
    Whether its URL is acceptable is ``fleet.urls.read_url_file``'s to say."""
    if path is None:
        return False
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PEEK)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, but unreadable: read_url_file says why
    text = data.decode("utf-8", "replace")
    return any(line.strip() and not line.strip().startswith("#") for line in text.splitlines())
