"""Plain value types of the public API (the Go structs of the device manager, in Python)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # protobuf loads only where a Device is made: a read that builds none never pays for it.
    from podstore.deviceplugin import Device

#: NUMA id under which kubelet files devices reported without topology.
NO_TOPOLOGY = -1

DevicesPerNUMA = dict[int, list[str] | None]


@dataclass(slots=True)
class PodDevicesEntry:
    """One (pod, container, resource) allocation as in a kubelet checkpoint: ``device_ids``
    maps NUMA id (-1: no topology) to device IDs, None is JSON null, ``alloc_resp`` the raw
    serialized ``ContainerAllocateResponse``."""

    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: DevicesPerNUMA | None
    alloc_resp: bytes | None


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class RuntimeMount:
    """kubelet's ``kubecontainer.Mount`` (the plugin's protobuf one: deviceplugin.Mount)."""

    name: str
    container_path: str
    host_path: str
    read_only: bool = False
    selinux_relabel: bool = False


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    path_on_host: str
    path_in_container: str
    permissions: str


@dataclass(frozen=True, slots=True)
class Annotation:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class RuntimeCDIDevice:
    """kubelet's ``kubecontainer.CDIDevice`` (the plugin's protobuf one: deviceplugin.CDIDevice)."""

    name: str


#: The contract's names (docs/api.md); code that needs both sides uses the names above.
Mount = RuntimeMount
CDIDevice = RuntimeCDIDevice


@dataclass(slots=True)
class DeviceRunContainerOptions:
    """Runtime settings merged from every plugin response of one container."""

    envs: list[EnvVar] = field(default_factory=list)
    mounts: list[RuntimeMount] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    cdi_devices: list[RuntimeCDIDevice] = field(default_factory=list)


class ResourceDeviceInstances(dict[str, dict[str, "Device"]]):
    """resource name → device ID → protobuf ``Device`` (kubelet's ResourceDeviceInstances)."""

    def clone(self) -> ResourceDeviceInstances:
        """Copy both map levels and the ``Device`` messages, so the copy shares nothing."""
        return copy.deepcopy(self)

    def filter(self, cond: Mapping[str, set[str] | frozenset[str]]) -> ResourceDeviceInstances:
        """Per resource named in ``cond``, only the devices it lists; as upstream, resources
        missing on either side are dropped and a kept resource may end empty."""
        out = ResourceDeviceInstances()
        for resource, wanted in cond.items():
            instances = self.get(resource)
            if instances is None:
                continue
            out[resource] = {d: dev for d, dev in instances.items() if d in wanted}
        return out


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """An entry not imported or not exported, with its ``index`` in the file or store, and why."""

    index: int
    pod_uid: str
    container_name: str
    resource_name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What ``PodStore.import_checkpoint`` did."""

    path: str
    version: int
    checksum: int
    boot_id: str | None
    entries: int
    imported: int
    pods: int
    registered_resources: int
    merged: bool
    skipped: tuple[SkippedEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What ``PodStore.export_checkpoint`` (or ``export_as``) wrote to ``path``: ``entries``,
    those ``left_out`` for lack of a response (kubelet writes none of those), and, for an
    export in an older format, its ``format`` and what it ``dropped`` (one line each)."""

    path: str
    entries: int
    left_out: tuple[SkippedEntry, ...] = ()
    format: str | None = None
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What ``PodStore.sync_checkpoint`` changed: events by kind; ``shape_changed``: only the
    file's null-vs-empty form changed (kept for export, no event) (docs/api.md)."""

    path: str
    version: int
    checksum: int
    boot_id: str | None
    entries: int
    inserted: int
    replaced: int
    deleted: int
    registered: int
    unregistered: int
    shape_changed: bool = False
    skipped: tuple[SkippedEntry, ...] = ()

    @property
    def events(self) -> int:
        """History events written."""
        return self.inserted + self.replaced + self.deleted + self.registered + self.unregistered

    @property
    def changed(self) -> bool:
        """Whether the sync wrote anything."""
        return bool(self.events) or self.shape_changed

    @property
    def result(self) -> str:
        """``"applied"`` when the store changed, ``"unchanged"`` when it already matched."""
        return "applied" if self.changed else "unchanged"


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts of a store (``podstore status``); ``pods`` and ``containers`` of every manager
    (docs/api.md)."""

    pods: int
    containers: int
    allocations: int
    device_rows: int
    distinct_devices: int
    registered_resources: int


@dataclass(frozen=True, slots=True)
class PodSummary:
    """One pod of ``Reader.pods()``: containers, entries, distinct (resource, device) pairs,
    resources in code point order."""

    pod_uid: str
    containers: int
    entries: int
    devices: int
    resources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeviceHolding:
    """One row of ``Reader.devices()``: a held device per holder with its NUMA ids, or a
    registered device nobody holds (``pod_uid``, ``container`` None, ``numa_nodes`` empty)."""

    resource: str
    device_id: str
    numa_nodes: tuple[int, ...]
    registered: bool
    pod_uid: str | None
    container: str | None


@dataclass(frozen=True, slots=True)
class DeviceOwner:
    """A container holding a device now (``Reader.owners()``, ``podstore owners``)."""

    pod_uid: str
    container: str
    resource: str


@dataclass(frozen=True, slots=True)
class AllocationEvent:
    """One change in the allocation history (ops and JSON: docs/sql.md).

    ``device_ids``: an entry event's NUMA map (a delete: what it had), a registration event's
    list. ``timestamp`` is aware UTC; ``seq`` is never reused. ``released``: what the event
    took from the entry, sorted (empty before revision 0005).
    """

    seq: int
    timestamp: datetime
    op: str
    pod_uid: str | None
    container_name: str | None
    resource_name: str
    device_ids: DevicesPerNUMA | list[str] | None
    released: list[str] = field(default_factory=list)
    #: The other managers' events (``cpu-set`` … ``node-delete``): the item's value
    #: (docs/sql.md); their ``device_ids`` are the DRA devices they name.
    payload: Any = None

    @property
    def manager(self) -> str:
        """``devices``, ``cpu``, ``memory``, ``dra``, ``node`` (topology, pod names) or
        ``end`` (an interval's end evidence)."""
        if self.op == "end":
            return "end"
        family, dash, _verb = self.op.partition("-")
        return family if dash else "devices"

    @property
    def devices(self) -> set[str]:
        """Every device ID the event names."""
        ids = self.device_ids
        if ids is None:
            return set()
        if isinstance(ids, list):
            return set(ids)
        return {d for lst in ids.values() for d in lst or ()}


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """Where the history's hash chain breaks; ``kind``: ``edited``, ``hash-edited``,
    ``genesis``, ``removed``, ``link-forged``, ``link-wrong``, ``head`` (docs/sql.md)."""

    seq: int
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class HistoryReport:
    """What ``PodStore.verify_history`` found: intact when ``breaks`` (the first
    ``MAX_BREAKS``, in seq order; ``break_count`` counts all) is empty. ``head_seq`` and
    ``head_hash``: the newest seq handed out and the chain's hash there."""

    store_id: str
    events: int
    links: int
    head_seq: int
    head_hash: bytes
    breaks: tuple[ChainBreak, ...]
    break_count: int

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def first_broken_seq(self) -> int | None:
        return self.breaks[0].seq if self.breaks else None


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The answer of ``PodStore.query``: column names and rows (tuples), in order."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """Rows as dicts keyed by column name (a repeated name keeps its last value)."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True, slots=True)
class NodeSyncReport:
    """What bringing one ``kind`` of the node's state to a source changed (docs/api.md):
    ``written``/``deleted`` events; ``form_changed``: only the file's form changed (no event);
    ``path`` None for a state given in Python; ``version``, ``checksum`` None for topology
    and names."""

    kind: str
    path: str | None
    version: str | None
    checksum: int | None
    verified: bool
    items: int
    written: int
    deleted: int
    form_changed: bool = False
    skipped: tuple[str, ...] = ()

    @property
    def events(self) -> int:
        """History events written."""
        return self.written + self.deleted

    @property
    def changed(self) -> bool:
        return bool(self.events) or self.form_changed

    @property
    def result(self) -> str:
        """``"applied"`` when the store changed, ``"unchanged"`` when it already matched."""
        return "applied" if self.changed else "unchanged"


@dataclass(frozen=True, slots=True)
class CdiReport:
    """What a CDI read changed: spec files whose rows were written or removed, the devices
    the specs read name, the directories that were not there, and what was skipped."""

    written: int
    removed: int
    devices: int
    absent: tuple[str, ...]
    skipped: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)


@dataclass(frozen=True, slots=True)
class NodeImportReport:
    """What ``PodStore.import_node`` did: a report per kind whose file was there, the
    ``absent`` kinds, and the topology and names reports (None: no source) (docs/api.md)."""

    kubelet_dir: str
    checkpoints: dict[str, SyncReport | NodeSyncReport]
    absent: tuple[str, ...]
    topology: NodeSyncReport | None
    names: NodeSyncReport | None
    #: The CDI specs read (None: not read).
    cdi: CdiReport | None = None

    @property
    def events(self) -> int:
        return sum(r.events for r in self._parts())

    @property
    def changed(self) -> bool:
        cdi = self.cdi is not None and self.cdi.changed
        return cdi or any(r.changed for r in self._parts())

    def _parts(self) -> list[SyncReport | NodeSyncReport]:
        parts = (*self.checkpoints.values(), self.topology, self.names)
        return [r for r in parts if r is not None]


@dataclass(frozen=True, slots=True)
class ContainerNuma:
    """One row of ``v_container_numa``: the sorted NUMA nodes of a container's devices (-1 left
    out), exclusive CPUs and memory (None: unknown); ``aligned`` None when fewer than two are
    known, else whether they are all the same."""

    pod_uid: str
    namespace: str | None
    pod_name: str | None
    container: str
    device_numa: tuple[int, ...] | None
    cpu_numa: tuple[int, ...] | None
    memory_numa: tuple[int, ...] | None
    aligned: bool | None


@dataclass(frozen=True, slots=True)
class NumaUsage:
    """One line of the node's picture per NUMA node (``PodStore.topology``, ``podstore
    topology``).

    ``numa_node`` is None for what no known NUMA node holds (devices reported without
    topology, registered devices nobody holds, DRA devices, CPUs outside the topology).
    ``kind`` and ``name``: ``cpu`` ``exclusive`` (``held`` CPUs held by containers, ``total``
    the node's CPUs) and ``cpu`` ``shared`` (the shared pool's CPUs there); ``memory`` and the
    memory type (``held`` bytes reserved, ``free`` bytes free, ``total`` bytes allocatable);
    ``device`` and the resource (``held`` devices held there; ``free``: registered devices
    nobody holds, on the line without a NUMA node); ``dra`` and the driver (``held`` devices
    prepared for claims). ``holders``: who holds them, ``NAMESPACE/NAME/CONTAINER=what`` (the
    pod UID when its name is not known; a claim as ``NAMESPACE/CLAIM``).
    """

    numa_node: int | None
    kind: str
    name: str
    held: int
    free: int | None
    total: int | None
    holders: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodePodSummary:
    """What one pod holds from the CPU, memory and DRA managers, and its containers of every
    manager (``PodStore.node_pods``)."""

    pod_uid: str
    cpus: int
    memory_bytes: int
    claims: int
    containers: int = 0


@dataclass(frozen=True, slots=True)
class DRAOwner:
    """A pod using a DRA device through a claim (``pod_uid`` None: a claim no pod uses)."""

    pod_uid: str | None
    namespace: str
    claim_name: str
    claim_uid: str
    share_id: str | None
