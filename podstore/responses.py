"""Decoded plugin responses: the rows written with each allocation, and the SQL run-option merge.

Every allocation's ``ContainerAllocateResponse`` is also kept as rows (``response_envs``,
``response_mounts``, ``response_devices``, ``response_annotations``, ``response_cdi_devices``),
written by ``writes.py`` in the allocation's own transaction. ``position`` is api.md's order
inside one response: env and annotation keys ascending (Python's code point order, which is the
UTF-8 byte order SQLite's BINARY collation uses), list fields in list order.

``device_run_container_options`` is then one query (``views.RUN_OPTIONS_FOR_CONTAINER``); this
module only shapes its rows into the runtime types and logs the conflicts it reports, as
``run_options.merge`` does (the hypothesis test in tests/test_audit_run_options.py holds the two
equal).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from podstore import cdi, codec, run_options
from podstore.types import (
    Annotation,
    CDIDevice,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    Mount,
)
from podstore.views import KINDS

INSERT_ENV = "INSERT INTO response_envs (allocation_id, position, name, value) VALUES (?, ?, ?, ?)"
INSERT_MOUNT = """
    INSERT INTO response_mounts (allocation_id, position, container_path, host_path, read_only)
    VALUES (?, ?, ?, ?, ?)
"""
INSERT_DEVICE = """
    INSERT INTO response_devices (allocation_id, position, container_path, host_path,
                                  permissions)
    VALUES (?, ?, ?, ?, ?)
"""
INSERT_ANNOTATION = """
    INSERT INTO response_annotations (allocation_id, position, name, value) VALUES (?, ?, ?, ?)
"""
INSERT_CDI = "INSERT INTO response_cdi_devices (allocation_id, position, name) VALUES (?, ?, ?)"

# A replacing insert keeps the allocation row, so its old response rows go explicitly (a
# deleted allocation loses them by ON DELETE CASCADE).
CLEAR = tuple(
    f"DELETE FROM {table} WHERE allocation_id = ?"
    for table in (
        "response_envs",
        "response_mounts",
        "response_devices",
        "response_annotations",
        "response_cdi_devices",
    )
)


@dataclass(slots=True)
class ResponseRows:
    """Rows for the five response tables, gathered for one or many allocations."""

    envs: list[tuple[int, int, str, str]] = field(default_factory=list)
    mounts: list[tuple[int, int, str, str, bool]] = field(default_factory=list)
    devices: list[tuple[int, int, str, str, str]] = field(default_factory=list)
    annotations: list[tuple[int, int, str, str]] = field(default_factory=list)
    cdi: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, allocation_id: int, raw: bytes | None) -> None:
        """Decode one stored response (already known to decode) into rows."""
        if not raw:
            return
        resp = codec.decode(raw)
        aid = allocation_id
        if resp.envs:
            self.envs.extend(
                (aid, pos, name, resp.envs[name]) for pos, name in enumerate(sorted(resp.envs))
            )
        self.mounts.extend(
            (aid, pos, m.container_path, m.host_path, m.read_only)
            for pos, m in enumerate(resp.mounts)
        )
        self.devices.extend(
            (aid, pos, d.container_path, d.host_path, d.permissions)
            for pos, d in enumerate(resp.devices)
        )
        if resp.annotations:
            self.annotations.extend(
                (aid, pos, key, resp.annotations[key])
                for pos, key in enumerate(sorted(resp.annotations))
            )
        self.cdi.extend((aid, pos, c.name) for pos, c in enumerate(resp.cdi_devices))

    def write(self, conn: sqlite3.Connection) -> None:
        for sql, rows in (
            (INSERT_ENV, self.envs),
            (INSERT_MOUNT, self.mounts),
            (INSERT_DEVICE, self.devices),
            (INSERT_ANNOTATION, self.annotations),
            (INSERT_CDI, self.cdi),
        ):
            if rows:
                conn.executemany(sql, rows)


def write(conn: sqlite3.Connection, allocation_id: int, raw: bytes | None) -> None:
    """Write the rows of one allocation's response (its old rows must be gone)."""
    if raw:
        rows = ResponseRows()
        rows.add(allocation_id, raw)
        rows.write(conn)


def clear(conn: sqlite3.Connection, allocation_ids: Sequence[tuple[int]]) -> None:
    """Remove the response rows of allocations that are about to be rewritten in place."""
    if not allocation_ids:
        return
    for sql in CLEAR:
        conn.executemany(sql, allocation_ids)


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
    opts: DeviceRunContainerOptions | None = None
    annotations: dict[str, str] = {}
    cdi_names: list[str] = []
    for kind_order, resource, _pos, name, value, permissions, read_only, rn, kept in rows:
        if opts is None:
            opts = DeviceRunContainerOptions()
        if kind_order == 0:
            continue  # the "container exists" marker
        if rn != 1:
            run_options.log_conflict(KINDS[kind_order - 1], name, kept, value, resource)
            continue
        if kind_order == 1:
            opts.envs.append(EnvVar(name, value))
        elif kind_order == 2:
            opts.devices.append(DeviceInfo(value, name, permissions))
        elif kind_order == 3:
            opts.mounts.append(
                Mount(
                    name=name,
                    container_path=name,
                    host_path=value,
                    read_only=bool(read_only),
                    selinux_relabel=False,
                )
            )
        elif kind_order == 4:
            annotations[name] = value
            opts.annotations.append(Annotation(name, value))
        else:
            cdi_names.append(name)
            if cdi_devices:
                opts.cdi_devices.append(CDIDevice(name))
    if opts is not None and cdi_annotations:
        for key, value in cdi.generate_annotations(pod_uid, container_name, cdi_names):
            prior = annotations.get(key)
            if prior is None:
                annotations[key] = value
                opts.annotations.append(Annotation(key, value))
            elif prior != value:
                run_options.log_conflict("annotation", key, prior, value, "CDI")
    return opts
