"""``podstore usage``: device-seconds and device-hours per namespace, pod, resource or
physical device over a window, from ``v_allocation_intervals`` (docs/sql.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.pure.times import format_ts
from podstore.storage.sql.intervals import USAGE_GROUPS, usage_sql

#: Before every stored time: the window's start when --since is not given.
_BEGINNING = "0001-01-01T00:00:00.000000Z"


@click.command("usage")
@click.option(
    "--by",
    type=click.Choice(sorted(USAGE_GROUPS)),
    default="namespace",
    show_default=True,
    help="What a row adds up.",
)
@click.option(
    "--since", callback=parse_time, default=None, help="The window's start (default: all)."
)
@click.option("--until", callback=parse_time, default=None, help="The window's end (default: now).")
@click.option("--resource", metavar="R", default=None, help="Only resource R (or DRA driver R).")
@output_option
@click.pass_obj
def usage(
    ctx: Context,
    by: str,
    since: str | None,
    until: str | None,
    resource: str | None,
    output: str,
) -> None:
    """Device-seconds and device-hours held per group over a window, from the history's
    allocation intervals: each clipped to the window, one still held counted to --until,
    times its share of the physical device. INTERVALS counts the intervals that overlap the
    window.

    An interval ends at the earliest evidence that its holder let the device go (the
    runtime's exit time, the CPU or memory manager or the pod-log directory letting the
    container or pod go, the claim or entry leaving its file): see docs/sql.md,
    "v_allocation_intervals". Times are ISO 8601 (UTC unless an offset is given).
    """
    end = until if until is not None else format_ts(datetime.now(UTC))
    start = since if since is not None else _BEGINNING
    if start >= end:
        raise click.BadParameter("--since must be before --until", param_hint="'--since'")
    params: dict[str, Any] = {"since": start, "until": end, "resource": resource}
    columns = list(USAGE_GROUPS[by])
    store = ctx.store(readonly=True)
    with store.reader() as reader:
        rows = reader.stream(usage_sql(by, resource is not None), params)
        emit(
            (
                {
                    **dict(zip(columns, row[: len(columns)], strict=True)),
                    "device_seconds": round(float(row[-2]), 3),
                    "device_hours": round(float(row[-2]) / 3600.0, 6),
                    "intervals": int(row[-1]),
                }
                for row in rows
            ),
            [*columns, "device_seconds", "device_hours", "intervals"],
            output,
        )
