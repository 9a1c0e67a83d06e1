"""The backoff and the once-per-problem log shared by the follower, the shipper hook and the
textfile writer (podstore/watch/failures.py)."""

from __future__ import annotations

import logging

import pytest
from harness.watch_support import log_lines

from podstore.watch.failures import Backoff, ProblemLog


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_reset() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert [backoff.next() for _ in range(2)] == [0.5, 1.0]
    backoff.cap = 1.5  # the follower's cap follows its interval
    assert [backoff.next() for _ in range(2)] == [1.5, 1.5]


@pytest.mark.parametrize(("first", "cap"), [(0, 1), (-1, 1), (2, 1)])
def test_backoff_refuses_bad_delays(first: float, cap: float) -> None:
    with pytest.raises(ValueError):
        Backoff(first, cap)


def test_a_problem_is_logged_once_while_it_lasts_and_its_end_once() -> None:
    logger = logging.getLogger("podstore.test.failures")
    with log_lines(logger.name) as lines:
        log = ProblemLog(logger, cleared="%s: good again")
        assert not log.clear("f")  # nothing to clear: nothing said
        assert log.report("busy", "sync %s", "busy")
        assert not log.report("busy", "sync %s", "busy")
        assert log.report("full", "sync %s", "full", level=logging.WARNING)
        assert log.clear("f")
        assert not log.clear("f")
        assert log.report("full", "sync %s", "full")  # after it cleared, the same is news
        silent = ProblemLog(logger)
        silent.report("x", "x")
        assert silent.clear()
    assert lines == [
        "ERROR sync busy",
        "WARNING sync full",
        "INFO f: good again",
        "ERROR sync full",
        "ERROR x",
    ]
