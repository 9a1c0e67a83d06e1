"""Progress bars for long commands (import, export, migrate, backup): on stderr, and only when
it is a terminal and the work is large, so a pipe or a script sees nothing of them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

#: Work smaller than this (entries, pages) finishes too fast for a bar to help.
MIN_UNITS = 1000

Progress = Callable[[int, int], None]


@contextmanager
def progress(label: str, *, min_units: int | None = MIN_UNITS) -> Iterator[Progress | None]:
    """A ``progress(done, total)`` callback drawing a bar once the total is ``min_units`` or
    more; None off a terminal or when ``min_units`` is None (the caller knows it is small)."""
    if min_units is None or not sys.stderr.isatty():
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
