"""``podstore prune``: remove old history events in one transaction (``PodStore.prune_history``)."""

from __future__ import annotations

import datetime

import click

from podstore.cli.common import parse_time
from podstore.cli.context import Context
from podstore.cli.durations import describe, duration
from podstore.pure.times import format_ts


@click.command()
@click.option(
    "--before",
    metavar="TIME",
    callback=parse_time,
    help="Remove events older than TIME (ISO 8601; UTC unless an offset is given).",
)
@click.option(
    "--keep",
    metavar="DURATION",
    callback=duration(),
    help="Remove events older than this (30d, 12h, 90m, …), counted back from now.",
)
@click.pass_obj
def prune(ctx: Context, before: str | None, keep: float | None) -> None:
    """Remove history events older than --before TIME or --keep DURATION; say how many went.

    One transaction. The event that carries each entry's (and each registered resource's)
    state at the cut is kept, so the history still replays to the current state, `owners
    --at` stays exact from the cut on, and `podstore verify` still checks the hash chain.
    Events the fleet database has not received yet are not protected here: ship first, or
    let `podstore watch --keep-history` prune (it never passes what the fleet lacks).
    """
    if (before is None) == (keep is None):
        raise click.UsageError("give one of --before TIME or --keep DURATION")
    if keep is not None:
        now = datetime.datetime.now(datetime.UTC)
        try:
            before = format_ts(now - datetime.timedelta(seconds=keep))
        except OverflowError:
            raise click.BadParameter(
                f"{describe(keep)} reaches before year 1", param_hint="'--keep'"
            ) from None
    assert before is not None
    removed = ctx.store().prune_history(before)
    noun = "event" if removed == 1 else "events"
    click.echo(f"pruned {removed} history {noun} older than {before}")
