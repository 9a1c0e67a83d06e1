"""What the long-running parts of ``podstore watch`` do with a failure that may persist: wait
longer between retries (:class:`Backoff`) and say it once (:class:`ProblemLog`)."""

from __future__ import annotations

import logging
from typing import Any


class Backoff:
    """Delays between retries: ``first`` seconds, doubling up to ``cap``; :meth:`reset` after a
    success."""

    def __init__(self, first: float, cap: float) -> None:
        if not 0 < first <= cap:
            raise ValueError("expected 0 < first <= cap")
        self.first = first
        self.cap = cap
        self._next = first

    def next(self) -> float:
        delay = min(self._next, self.cap)
        self._next = min(delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first


class ProblemLog:
    """Logs a problem once while it stays the same: again only when its text changes, and
    once (``cleared``, if given) when it goes away."""

    def __init__(self, logger: logging.Logger, *, cleared: str | None = None) -> None:
        self.logger = logger
        self.cleared = cleared
        self.current: str | None = None

    def report(
        self,
        problem: str,
        message: str,
        *args: Any,
        level: int = logging.ERROR,
        fields: dict[str, Any] | None = None,
    ) -> bool:
        """Log ``message % args`` (with ``fields`` for ``--log-format json``) unless
        ``problem`` is the one logged last; True if logged."""
        if problem == self.current:
            return False
        self.logger.log(level, message, *args, extra=fields)
        self.current = problem
        return True

    def clear(self, *args: Any) -> bool:
        """The problem went away: log ``cleared % args`` if there was one; True if there was."""
        if self.current is None:
            return False
        self.current = None
        if self.cleared is not None:
            self.logger.info(self.cleared, *args)
        return True
