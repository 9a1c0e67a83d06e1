"""Progress bars for long commands (import, export, migrate, backup): on a terminal only.

A bar is drawn on stderr, and only when stderr is a terminal and the work is large
(:data:`MIN_UNITS` or more units: entries, pages, ...), so a pipe, a log file or a script sees
nothing of it and stdout carries only the command's report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

#: Work smaller than this (entries, pages) finishes too fast for a bar to help.
MIN_UNITS = 1000

Progress = Callable[[int, int], None]


def on_terminal() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(label: str, *, min_units: int | None = MIN_UNITS) -> Iterator[Progress | None]:
    """A ``progress(done, total)`` callback drawing a bar labelled ``label`` once the total is
    known to be ``min_units`` or more, or None when stderr is not a terminal or
    ``min_units`` is None (the caller knows the work is small)."""
    if min_units is None or not on_terminal():
        yield None
        return
    bar: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            if total < min_units:
                return
            bar = click.progressbar(length=total, label=label, file=sys.stderr)
            bar.__enter__()
        bar.length = max(total, 1)
        bar.update(done - bar.pos)

    try:
        yield update
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
