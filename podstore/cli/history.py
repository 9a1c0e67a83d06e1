"""``podstore history``: the allocation event log."""

from __future__ import annotations

from typing import Any

import click

from podstore.cli.common import complete_pods, parse_time
from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.types import AllocationEvent

COLUMNS = [
    "seq",
    "timestamp",
    "op",
    "pod_uid",
    "container",
    "resource",
    "device_ids",
    "released",
]


def _flat(ids: dict[int, list[str] | None] | list[str] | None) -> str:
    """A NUMA map as ``0:a,b 1:c`` (a registered list as ``a,b``) for table and CSV cells."""
    if ids is None:
        return ""
    if isinstance(ids, list):
        return ",".join(ids)
    return " ".join(f"{node}:{','.join(lst or ())}" for node, lst in ids.items())


def _structured(ids: dict[int, list[str] | None] | list[str] | None) -> Any:
    """As stored: JSON object keys are strings."""
    if isinstance(ids, dict):
        return {str(node): lst for node, lst in ids.items()}
    return ids


def _row(ev: AllocationEvent, flat: bool) -> dict[str, Any]:
    return {
        "seq": ev.seq,
        "timestamp": ev.timestamp.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z",
        "op": ev.op,
        "pod_uid": ev.pod_uid,
        "container": ev.container_name,
        "resource": ev.resource_name,
        "device_ids": _flat(ev.device_ids) if flat else _structured(ev.device_ids),
        "released": ",".join(ev.released) if flat else ev.released,
    }


@click.command("history")
@click.option(
    "--pod",
    "pod",
    metavar="P",
    default=None,
    shell_complete=complete_pods,
    help="Only events of pod P.",
)
@click.option("--device", "device", metavar="D", default=None, help="Only events naming device D.")
@click.option(
    "--since", callback=parse_time, default=None, help="Only events at or after this time."
)
@click.option("--until", callback=parse_time, default=None, help="Only events before this time.")
@output_option
@click.pass_obj
def history_(
    ctx: Context,
    pod: str | None,
    device: str | None,
    since: str | None,
    until: str | None,
    output: str,
) -> None:
    """List allocation events, oldest first: insert, replace, import, backfill, delete,
    registered and unregistered (docs/sql.md explains each). RELEASED names the devices an
    event took from an entry that held them before it (a replace, an import or a sync over
    an existing entry); --device D also lists the events that released D.

    Times are ISO 8601 (2026-12-02T10:32:00Z; UTC unless an offset is given).
    """
    flat = output in ("table", "csv")
    with ctx.store(readonly=True).reader() as reader:
        events = reader.history(pod_uid=pod, device_id=device, since=since, until=until)
        emit((_row(ev, flat) for ev in events), COLUMNS, output)
