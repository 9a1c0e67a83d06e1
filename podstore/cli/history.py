"""``podstore history``: the allocation event log."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from podstore.checkpoint import PodName
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
    "manager",
    "namespace",
    "name",
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


def _row(ev: AllocationEvent, flat: bool, names: Mapping[str, PodName]) -> dict[str, Any]:
    if ev.manager == "devices":
        ids = _flat(ev.device_ids) if flat else _structured(ev.device_ids)
    else:
        # The other managers' events: the item's value as the history holds it.
        ids = _COMPACT.encode(ev.payload) if flat else ev.payload
    name = names.get(ev.pod_uid) if ev.pod_uid is not None else None
    return {
        "seq": ev.seq,
        "timestamp": ev.timestamp.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z",
        "op": ev.op,
        "pod_uid": ev.pod_uid,
        "container": ev.container_name,
        "resource": ev.resource_name,
        "device_ids": ids,
        "released": ",".join(ev.released) if flat else ev.released,
        "manager": ev.manager,
        "namespace": name.namespace if name else None,
        "name": name.name if name else None,
    }


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


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

    MANAGER says whose state changed: devices (the device manager), cpu, memory, dra (their
    *-set and *-delete events; DEVICE_IDS is then the new value: CPU ids, memory blocks, a
    claim — --device driver/pool/device finds a DRA device's), or node (topology, pod
    names), or end (an allocation interval's end evidence: DEVICE_IDS holds its time and
    source; docs/sql.md, "v_allocation_intervals"). NAMESPACE and NAME are the pod's, also
    for pods since deleted.

    Times are ISO 8601 (2026-12-02T10:32:00Z; UTC unless an offset is given).
    """
    flat = output in ("table", "csv")
    store = ctx.store(readonly=True)
    names = store.pod_names(past=True)
    with store.reader() as reader:
        events = reader.history(pod_uid=pod, device_id=device, since=since, until=until)
        emit((_row(ev, flat, names) for ev in events), COLUMNS, output)
