"""``import_node``: every checkpoint of a kubelet directory, the NUMA topology and pod names,
verified before the write lock (one failure writes nothing), then each written where it differs.

An absent file, a ``sysfs`` that is no sysfs, a ``pod_logs`` that is no directory or a CDI
directory that is not there leaves its kind as it was: a mistyped path must not delete what a
real one gave.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field, replace

from podstore.checkpoint import (
    FILE_NAMES,
    KINDS,
    NumaTopology,
    PodNames,
    read_numa_topology,
    read_pod_names,
)
from podstore.checkpoint.cdi_specs import DEFAULT_CDI_DIRS, CdiSpecs, read_cdi_specs
from podstore.checkpoint.topology import is_sysfs
from podstore.errors import CheckpointNotFoundError
from podstore.storage import sync as device_sync
from podstore.storage.node import cdi, numa_and_names
from podstore.storage.node import sync as node_sync
from podstore.types import NodeImportReport, NodeSyncReport, SyncReport

#: Kubelet's root directory, where it keeps every checkpoint.
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"


@dataclass(slots=True)
class PreparedNode:
    kubelet_dir: str
    devices: device_sync.PreparedSync | None
    kinds: dict[str, node_sync.PreparedNode] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    sysfs: str = ""
    #: Read from ``sysfs`` (None: it is no sysfs, the stored topology stays).
    topology: NumaTopology | None = None
    has_sysfs: bool = False
    pod_logs: str = ""
    #: Read from ``pod_logs`` (None: it is no directory, the stored names stay).
    names: PodNames | None = None
    cdi: CdiSpecs | None = None


def prepare(
    kubelet_dir: str | os.PathLike[str],
    sysfs: str | os.PathLike[str],
    pod_logs: str | os.PathLike[str],
    *,
    cdi_dirs: tuple[str, ...] | list[str] = DEFAULT_CDI_DIRS,
    max_bytes: int | None = None,
) -> PreparedNode:
    """Read and verify every present checkpoint of ``kubelet_dir``, the topology under
    ``sysfs``, the names under ``pod_logs`` and the CDI specs of ``cdi_dirs``. Raises the
    first file's error (unreadable, corrupt, not of its kind, values the store cannot hold),
    and CheckpointNotFoundError when none of the files is there."""
    root = os.path.abspath(os.fspath(kubelet_dir))
    out = PreparedNode(root, None)
    for kind in KINDS:
        path = os.path.join(root, FILE_NAMES[kind])
        try:
            if kind == "devices":
                out.devices = device_sync.prepare(path, max_bytes=max_bytes)
            else:
                out.kinds[kind] = node_sync.prepare(path, kind, max_bytes=max_bytes)
        except CheckpointNotFoundError:
            out.absent.append(kind)
    if len(out.absent) == len(KINDS):
        raise CheckpointNotFoundError(
            f"{root}: none of kubelet's checkpoint files is there (not kubelet's directory?)"
        )
    out.sysfs = os.path.abspath(os.fspath(sysfs))
    out.has_sysfs = is_sysfs(sysfs)
    if out.has_sysfs:
        out.topology = read_numa_topology(sysfs)
    out.pod_logs = os.path.abspath(os.fspath(pod_logs))
    if os.path.isdir(pod_logs):
        out.names = read_pod_names(pod_logs)
    out.cdi = read_cdi_specs(cdi_dirs)
    return out


def apply(conn: sqlite3.Connection, prepared: PreparedNode) -> NodeImportReport:
    """Load ``prepared`` in the caller's transaction."""
    reports: dict[str, SyncReport | NodeSyncReport] = {}
    if prepared.devices is not None:
        reports["devices"] = device_sync.apply(conn, prepared.devices)
    for kind, kind_prepared in prepared.kinds.items():
        reports[kind] = node_sync.apply(conn, kind_prepared)
    topology = names = None
    if prepared.has_sysfs:
        topology = node_sync.apply_topology_or_names(
            conn,
            "topology",
            numa_and_names.TOPOLOGY,
            numa_and_names.topology_items(prepared.topology),
            prepared.sysfs,
        )
        if prepared.topology is not None:
            topology = replace(topology, skipped=prepared.topology.skipped)
    if prepared.names is not None:
        names = node_sync.apply_topology_or_names(
            conn,
            "names",
            numa_and_names.NAMES,
            numa_and_names.name_items(prepared.names),
            prepared.pod_logs,
        )
        names = replace(names, skipped=prepared.names.skipped)
    cdi_report = None if prepared.cdi is None else cdi.apply(conn, prepared.cdi)
    return NodeImportReport(
        prepared.kubelet_dir, reports, tuple(prepared.absent), topology, names, cdi_report
    )
