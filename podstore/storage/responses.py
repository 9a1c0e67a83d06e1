"""Decoded plugin responses: the JSON each allocation keeps beside its bytes, and the SQL
run-option merge.

``allocations.response`` holds each response's settings as canonical JSON (:func:`to_json`):
equal settings give equal text, so a sync compares texts. Revision 0006 keeps a frozen copy of
:func:`to_json`, and tests/test_audit_run_options.py holds the SQL merge (:func:`shape`) equal
to the Python one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from podstore.pure import run_options
from podstore.pure.alloc_resp import Response
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
