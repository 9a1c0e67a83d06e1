"""Decoded plugin responses: the rows written with each allocation, and the SQL run-option merge.

Every allocation's ``ContainerAllocateResponse`` is also kept as rows (``response_envs``,
``response_mounts``, ``response_devices``, ``response_annotations``, ``response_cdi_devices``),
written by ``storage/entries.py`` in the allocation's own transaction, from what the write
already decoded (``rules/alloc_resp.Response``). ``position`` is api.md's order inside one
response: env and annotation keys ascending, list fields in list order.

The run-option merge in SQL over these rows is ``sql/views.RUN_OPTIONS_FOR_CONTAINER`` (the
one-container form of the ``v_run_options`` views); :func:`shape` turns its rows into the
runtime types and logs the conflicts it reports, as ``rules/run_options.merge`` does.
``device_run_container_options`` itself uses the blob merge (faster for one container); the
hypothesis test in tests/test_audit_run_options.py holds all of them equal.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from podstore.rules import run_options
from podstore.rules.alloc_resp import Response
from podstore.storage.sql import responses as sql
from podstore.types import DeviceRunContainerOptions


@dataclass(slots=True)
class ResponseRows:
    """Rows for the five response tables, gathered for one or many allocations."""

    envs: list[tuple[int, int, str, str]] = field(default_factory=list)
    mounts: list[tuple[int, int, str, str, bool]] = field(default_factory=list)
    devices: list[tuple[int, int, str, str, str]] = field(default_factory=list)
    annotations: list[tuple[int, int, str, str]] = field(default_factory=list)
    cdi: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, allocation_id: int, response: Response | None) -> None:
        """The rows of one allocation's response (nothing for no response)."""
        if response is None:
            return
        aid = allocation_id
        r = response
        # List comprehensions rather than extend(generator): this runs once per imported entry.
        if r.envs:
            self.envs += [(aid, pos, name, value) for pos, (name, value) in enumerate(r.envs)]
        if r.mounts:
            self.mounts += [(aid, pos, c, h, ro) for pos, (c, h, ro) in enumerate(r.mounts)]
        if r.devices:
            self.devices += [(aid, pos, c, h, p) for pos, (c, h, p) in enumerate(r.devices)]
        if r.annotations:
            self.annotations += [(aid, pos, k, v) for pos, (k, v) in enumerate(r.annotations)]
        if r.cdi_devices:
            self.cdi += [(aid, pos, name) for pos, name in enumerate(r.cdi_devices)]

    def write(self, conn: sqlite3.Connection) -> None:
        for statement, rows in (
            (sql.INSERT_ENV, self.envs),
            (sql.INSERT_MOUNT, self.mounts),
            (sql.INSERT_DEVICE, self.devices),
            (sql.INSERT_ANNOTATION, self.annotations),
            (sql.INSERT_CDI, self.cdi),
        ):
            if rows:
                conn.executemany(statement, rows)


def write(conn: sqlite3.Connection, allocation_id: int, response: Response | None) -> None:
    """Write the rows of one allocation's response (its old rows must be gone): one
    executemany per table that gets rows (the path of every insert)."""
    if response is None:
        return
    aid, r = allocation_id, response
    if r.envs:
        conn.executemany(sql.INSERT_ENV, [(aid, i, n, v) for i, (n, v) in enumerate(r.envs)])
    if r.mounts:
        conn.executemany(sql.INSERT_MOUNT, [(aid, i, *m) for i, m in enumerate(r.mounts)])
    if r.devices:
        conn.executemany(sql.INSERT_DEVICE, [(aid, i, *d) for i, d in enumerate(r.devices)])
    if r.annotations:
        conn.executemany(
            sql.INSERT_ANNOTATION, [(aid, i, k, v) for i, (k, v) in enumerate(r.annotations)]
        )
    if r.cdi_devices:
        conn.executemany(sql.INSERT_CDI, [(aid, i, n) for i, n in enumerate(r.cdi_devices)])


def clear(conn: sqlite3.Connection, allocation_ids: Sequence[tuple[int]]) -> None:
    """Remove the response rows of allocations that are about to be rewritten in place."""
    if not allocation_ids:
        return
    for statement in sql.CLEAR:
        conn.executemany(statement, allocation_ids)


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
