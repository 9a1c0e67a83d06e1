"""Decoded plugin responses: the JSON each allocation keeps beside its bytes, and the SQL
run-option merge.

Every allocation's ``ContainerAllocateResponse`` is also kept decoded, as one JSON text in
``allocations.response`` (revision 0006; before it, as rows of five tables), written by
``storage/entries.py`` with the allocation, from what the write already decoded
(``rules/alloc_resp.Response``). The views ``response_envs``, ``response_mounts``,
``response_devices``, ``response_annotations`` and ``response_cdi_devices`` read it back as
the rows docs/sql.md describes.

The JSON
--------
An object with up to five members, in this order, each present only when the response sets
something of that kind: ``"envs"`` ``[[name, value], …]`` and ``"annotations"`` ``[[key,
value], …]`` (keys ascending by code point), ``"mounts"`` ``[[container_path, host_path,
read_only], …]`` (``read_only`` a JSON boolean), ``"devices"`` ``[[container_path, host_path,
permissions], …]`` and ``"cdi_devices"`` ``[name, …]`` (list order). Compact (no spaces),
non-ASCII characters as themselves. NULL when the response sets nothing, or there is none.
The encoding is canonical: two responses that decode to the same settings have the same text,
so a sync compares texts (``sql/sync.CHANGED_RESPONSES``). Revision 0006 writes the same text
for the rows it converts (its own frozen copy of :func:`to_json`; a test holds them equal).

The run-option merge in SQL over the ``response_*`` views is ``sql/views.RUN_OPTIONS_FOR_
CONTAINER`` (the one-container form of the ``v_run_options`` views); :func:`shape` turns its
rows into the runtime types and logs the conflicts it reports, as ``rules/run_options.merge``
does. ``device_run_container_options`` itself merges the stored bytes (faster for one
container); the hypothesis test in tests/test_audit_run_options.py holds them all equal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from podstore.rules import run_options
from podstore.rules.alloc_resp import Response
from podstore.types import DeviceRunContainerOptions

# One encoder, reused (json.dumps with options builds a new one per call).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def to_json(response: Response | None) -> str | None:
    """The ``allocations.response`` text of a decoded response (see "The JSON")."""
    if response is None:
        return None
    r = response
    doc: dict[str, Any] = {}
    if r.envs:
        doc["envs"] = r.envs
    if r.mounts:
        doc["mounts"] = r.mounts
    if r.devices:
        doc["devices"] = r.devices
    if r.annotations:
        doc["annotations"] = r.annotations
    if r.cdi_devices:
        doc["cdi_devices"] = r.cdi_devices
    return _JSON.encode(doc) if doc else None


def shape(
    pod_uid: str,
    container_name: str,
    rows: Iterable[Sequence[Any]],
    *,
    cdi_devices: bool,
    cdi_annotations: bool,
) -> DeviceRunContainerOptions | None:
    """DeviceRunContainerOptions from ``RUN_OPTIONS_FOR_CONTAINER`` rows; None if there are none
    (the container is unknown). Conflicts the query reports are logged, in merge order."""
    out: run_options.OptionsBuilder | None = None
    for kind_order, resource, _pos, name, value, permissions, read_only, rn, kept in rows:
        if out is None:
            out = run_options.OptionsBuilder(cdi_devices=cdi_devices)
        if kind_order == 0:
            continue  # the "container exists" marker
        if rn != 1:
            run_options.log_conflict(run_options.KINDS[kind_order - 1], name, kept, value, resource)
        elif kind_order == 1:
            out.env(name, value)
        elif kind_order == 2:
            out.device(name, value, permissions)
        elif kind_order == 3:
            out.mount(name, value, bool(read_only))
        elif kind_order == 4:
            out.annotation(name, value)
        else:
            out.cdi_device(name)
    if out is None:
        return None
    return out.finish(pod_uid, container_name, cdi_annotations=cdi_annotations)
