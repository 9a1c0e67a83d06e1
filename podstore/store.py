"""PodStore, the facade (contract: docs/api.md): each method checks its arguments (``pure/``),
takes a connection in the right transaction (``sqlite/sessions.py``) and hands it to
``storage/`` or runs one of its statements (``storage/sql/``).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from podstore.checkpoint.podnames import DEFAULT_POD_LOGS, PodName, PodNames
from podstore.checkpoint.topology import DEFAULT_SYSFS, NumaTopology
from podstore.errors import InvalidInputError, PodStoreError
from podstore.pure import run_options, validate
from podstore.pure.alloc_resp import AllocRespInput
from podstore.pure.alloc_resp import from_argument as response_from_argument
from podstore.pure.times import TimeArg, parse_time
from podstore.reading import Reader, history_query
from podstore.sqlite import forking, integrity
from podstore.sqlite import readonly as readonly_sql
from podstore.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    ConnectOptions,
    Durability,
    database_path,
)
from podstore.sqlite.migrate import ensure_schema
from podstore.sqlite.readonly import Guarded, Limits, RowStream
from podstore.sqlite.sessions import Sessions
from podstore.storage import chain as history_chain
from podstore.storage import entries as entry_store
from podstore.storage import events
from podstore.storage import rows as entry_rows
from podstore.storage.entries import hex_text, unhex_text
from podstore.storage.node import dra as node_dra
from podstore.storage.node import numa_and_names
from podstore.storage.node import read as node_read
from podstore.storage.node import topology as node_topology
from podstore.storage.sql import entries as q
from podstore.storage.sql import events as events_sql
from podstore.storage.sql import node_read as node_read_sql
from podstore.types import (
    AllocationEvent,
    CdiReport,
    ContainerNuma,
    DeviceRunContainerOptions,
    DRAOwner,
    ExportReport,
    HistoryReport,
    ImportReport,
    NodeImportReport,
    NodePodSummary,
    NodeSyncReport,
    NumaUsage,
    PodDevicesEntry,
    QueryResult,
    ResourceDeviceInstances,
    SkippedEntry,
    StoreStats,
    SyncReport,
)

if TYPE_CHECKING:
    from podstore.checkpoint import (
        CPUManagerState,
        DRAClaim,
        DRAState,
        MemoryBlock,
        MemoryManagerState,
    )
    from podstore.checkpoint.cdi_specs import CdiSpecs
    from podstore.storage.node import sync as node_sync

# What only writes, imports, exports and syncs need is imported in the methods: a process that
# only reads does not pay for it at start-up (docs/performance.md, "Start-up and open").
#: import_node's default kubelet directory (as storage/node/import_dir.py).
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"

log = logging.getLogger("podstore")

#: PodStore.open's integrity check modes (docs/reliability.md, "What is checked at open").
Verify = Literal["auto", "blocking", "background", "off"]
VERIFY_MODES = ("auto", "blocking", "background", "off")

# PodStore(...) is refused: only open() sets a store up (schema checked, connections made).
_OPEN_TOKEN = object()


class PodStore:
    """A crash-safe store of device allocations; open with :meth:`open`. Shared by threads
    and processes; every mutating call is one durable transaction (or joins :meth:`transaction`).
    """

    def __init__(self, sessions: Sessions, *, _token: object = None) -> None:
        if _token is not _OPEN_TOKEN:
            raise PodStoreError("create a PodStore with PodStore.open(path), not PodStore(...)")
        self._sessions = sessions
        self._store_id: str | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        upgrade: bool = True,
        durability: Durability = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        verify: Verify = "auto",
    ) -> PodStore:
        """Open (creating, 0600) the store at a path or sqlite URL (docs/api.md; ``verify``:
        docs/reliability.md). Raises InvalidInputError, SchemaError, StoreCorruptError or
        StoreBusyError."""
        if verify not in VERIFY_MODES:
            raise InvalidInputError(
                f"verify: expected 'auto', 'blocking', 'background' or 'off', got {verify!r}"
            )
        if durability not in ("full", "normal"):
            raise InvalidInputError(f"durability: expected 'full' or 'normal', got {durability!r}")
        # ConnectOptions checks busy_timeout (type, finite, range) for every caller.
        options = ConnectOptions(
            path=database_path(path),
            readonly=bool(readonly),
            durability=durability,
            busy_timeout=busy_timeout,
        )
        check = verify == "blocking" or (
            verify == "auto" and integrity.crash_evidence(options.path)
        )
        with forking.activity():  # a fork in another thread waits for the open to finish
            unmarked, probe = ensure_schema(options, upgrade=upgrade, check=check)
            sessions = Sessions(options)
            sessions.unmarked = unmarked
            if probe is not None:
                sessions.adopt(probe)
            sessions.conn()  # fail now, not on first use
            if verify == "background" or (verify == "auto" and not check):
                sessions.start_background_check(gate_writes=verify == "auto")
        return cls(sessions, _token=_OPEN_TOKEN)

    def wait_verified(self, timeout: float | None = None) -> bool:
        """True once the open-time check passed (or none runs), False on timeout;
        StoreCorruptError if it found damage."""
        return self._sessions.wait_checked(timeout)

    @property
    def path(self) -> str:
        return self._sessions.options.path

    @property
    def readonly(self) -> bool:
        return self._sessions.options.readonly

    @property
    def store_id(self) -> str:
        """The store's UUID, made at creation and kept for life (the fleet keys events by it)."""
        if self._store_id is None:
            with self._sessions.use() as conn:
                value = entry_store.meta(conn, "store_id")
            if value is None:  # pragma: no cover - every store at head has one
                raise PodStoreError("the store has no store_id; run `podstore migrate upgrade`")
            self._store_id = value
        return self._store_id

    def reset_identity(self) -> str:
        """Give a copied store a new random ``store_id`` and re-chain its history, in one
        transaction; returns the new id. Raises ReadOnlyStoreError, or StoreCorruptError
        (nothing changed) when the chain does not verify: re-chaining would hide the break.
        """
        new_id = str(uuid.uuid4())
        with self._sessions.write() as conn:
            history_chain.rechain(conn, new_id)  # checks the chain under the old id first
            conn.execute(events_sql.SET_STORE_ID, (new_id,))
        self._store_id = None  # read again: an enclosing transaction may still roll back
        return new_id

    def close(self) -> None:
        """Close every connection this store opened. Further calls raise PodStoreError."""
        self._sessions.close()

    def __enter__(self) -> PodStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transactions ----------------------------------------------------------------------

    def transaction(self) -> AbstractContextManager[PodStore]:
        """Group the thread's calls into one atomic commit (nesting as savepoints); an exception
        rolls all back (interrupts: docs/api.md, "Interrupts, SIGTERM and cancellation")."""
        return self._sessions.transaction(self)

    def _rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        with self._sessions.use() as conn:
            return conn.execute(sql, params).fetchall()

    # ---- podDevices: writes ----------------------------------------------------------------

    def insert(
        self,
        pod_uid: str,
        container_name: str,
        resource_name: str,
        devices: Mapping[int, Sequence[str] | AbstractSet[str] | None] | None,
        alloc_resp: AllocRespInput,
    ) -> None:
        """Record (or replace, in place) one container resource's devices (NUMA id → IDs) and
        plugin response. Raises InvalidInputError naming the bad argument (nothing written)."""
        row = entry_rows.Row(
            validate.text(pod_uid, "pod_uid"),
            validate.text(container_name, "container_name"),
            validate.text(resource_name, "resource_name"),
            validate.devices_per_numa(devices),
            response_from_argument(alloc_resp),
        )
        with self._sessions.write() as conn:
            entry_store.write_one(conn, row)

    def delete(
        self, pod_uids: list[str] | tuple[str, ...] | AbstractSet[str] | Iterator[str]
    ) -> None:
        """Drop whole pods; unknown UIDs are ignored. A bare str (one pod per character as an
        ``Iterable[str]``) raises InvalidInputError."""
        uids = validate.texts(pod_uids, "pod_uids")
        with self._sessions.write() as conn:
            entry_store.delete_pods(conn, uids)

    def from_checkpoint_data(self, entries: Iterable[PodDevicesEntry]) -> None:
        """Merge checkpoint entries as kubelet's restore does (undecodable ones logged, skipped)."""
        rows: list[entry_rows.Row] = []
        for i, entry in enumerate(validate.checkpoint_entries(entries, "entries")):
            row = entry_rows.to_row(entry)
            if isinstance(row, str):
                log.error(
                    "skipping checkpoint entry %d (%s/%s/%s): AllocResp does not decode: %s",
                    i,
                    entry.pod_uid,
                    entry.container_name,
                    entry.resource_name,
                    row,
                )
                continue
            rows.append(row)
        with self._sessions.write() as conn:
            entry_store.write_rows(conn, rows, "import")

    def set_registered_devices(
        self, mapping: Mapping[str, Sequence[str] | AbstractSet[str] | None] | None
    ) -> None:
        """Replace the whole RegisteredDevices mapping (None, or a None list: JSON null)."""
        registered = validate.registered(mapping, "mapping")
        with self._sessions.write() as conn:
            entry_store.replace_registered(conn, registered, whole=True)

    # ---- podDevices: reads -----------------------------------------------------------------

    def pods(self) -> set[str]:
        """Every pod UID in the store."""
        return {r[0] for r in self._rows(q.PODS)}

    def size(self) -> int:
        """The number of pods."""
        return int(self._rows(q.SIZE)[0][0])

    def __len__(self) -> int:
        return self.size()

    def has_pod(self, pod_uid: str) -> bool:
        return bool(self._rows(q.HAS_POD, (validate.text(pod_uid, "pod_uid"),)))

    def __contains__(self, pod_uid: object) -> bool:
        return isinstance(pod_uid, str) and self.has_pod(pod_uid)

    def container_devices(
        self, pod_uid: str, container_name: str, resource_name: str
    ) -> set[str] | None:
        """The devices of one entry (empty set: none, which kubelet reads as allocated); None
        when the entry is unknown."""
        rows = self._rows(
            q.CONTAINER_DEVICES,
            (
                validate.text(pod_uid, "pod_uid"),
                validate.text(container_name, "container_name"),
                validate.text(resource_name, "resource_name"),
            ),
        )
        if not rows:
            return None
        return {r[0] for r in rows if r[0] is not None}

    def pod_devices(self, pod_uid: str, resource_name: str) -> set[str]:
        """Union of the resource's devices over all containers of the pod (empty if unknown)."""
        rows = self._rows(
            q.POD_DEVICES,
            (validate.text(pod_uid, "pod_uid"), validate.text(resource_name, "resource_name")),
        )
        return {r[0] for r in rows}

    def add_container_allocated_resources(
        self, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        """``allocated[res] |= devices`` for every resource of the container (in place)."""
        self._apply_container_sets(q.ADD_CONTAINER_RESOURCES, pod_uid, container_name, allocated)

    def remove_container_allocated_resources(
        self, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        """``allocated[res] -= devices`` for every resource of the container (in place); a
        resource not yet in ``allocated`` gains an empty set, as upstream."""
        self._apply_container_sets(q.REMOVE_CONTAINER_RESOURCES, pod_uid, container_name, allocated)

    def _apply_container_sets(
        self, sql: str, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        acc = validate.device_sets(allocated, "allocated")
        params = {
            "pod": validate.text(pod_uid, "pod_uid"),
            "container": validate.text(container_name, "container_name"),
            "acc": json.dumps({hex_text(r): sorted(map(hex_text, d)) for r, d in acc.items()}),
        }
        result: dict[str, set[str]] = {}
        for resource, device_id in self._rows(sql, params):
            devs = result.setdefault(unhex_text(resource), set())
            if device_id is not None:
                devs.add(unhex_text(device_id))
        allocated.update(result)

    def devices(self) -> dict[str, set[str]]:
        """resource → every device allocated to it (kubelet's ``devices()``)."""
        out: dict[str, set[str]] = {}
        with self._sessions.snapshot() as conn:
            for (resource,) in conn.execute(q.RESOURCES).fetchall():
                (ids,) = conn.execute(q.RESOURCE_DEVICES_JSON, (resource,)).fetchone()
                devs = out[resource] = set(json.loads(ids))
                devs.discard(None)  # an entry without devices gave a NULL
        return out

    def get_container_devices(
        self, pod_uid: str, container_name: str
    ) -> ResourceDeviceInstances | None:
        """resource → device ID → Device with its NUMA topology (docs/api.md); None for an
        unknown container."""
        rows = self._rows(
            q.CONTAINER_TOPOLOGY,
            (validate.text(pod_uid, "pod_uid"), validate.text(container_name, "container_name")),
        )
        return entry_store.shape_topology(rows)

    def get_pod_and_container_for_device(
        self, device_id: str, resource_name: str | None = None
    ) -> tuple[str, str] | None:
        """(pod UID, container) of the earliest inserted entry holding ``device_id``, or None;
        give ``resource_name`` when two plugins may export the same ID."""
        dev = validate.text(device_id, "device_id")
        if resource_name is None:
            rows = self._rows(q.OWNER_OF_DEVICE, (dev,))
        else:
            rows = self._rows(
                q.OWNER_OF_RESOURCE_DEVICE, (dev, validate.text(resource_name, "resource_name"))
            )
        return (rows[0][0], rows[0][1]) if rows else None

    def device_run_container_options(
        self,
        pod_uid: str,
        container_name: str,
        *,
        cdi_devices: bool = True,
        cdi_annotations: bool = False,
    ) -> DeviceRunContainerOptions | None:
        """Runtime settings merged from the container's plugin responses; None if unknown.
        The ``cdi_*`` flags mimic kubelet 1.28–1.31 (docs/api.md)."""
        pod = validate.text(pod_uid, "pod_uid")
        container = validate.text(container_name, "container_name")
        # Merged in Python: 4x faster than the audit views' SQL merge, which gives the same
        # result (tests/test_audit_run_options.py).
        rows = self._rows(q.CONTAINER_RESPONSES, (pod, container))
        if not rows:
            return None
        return run_options.merge(
            pod,
            container,
            [(resource, raw) for resource, raw in rows if resource is not None],
            cdi_devices=bool(cdi_devices),
            cdi_annotations=bool(cdi_annotations),
        )

    def to_checkpoint_data(self) -> list[PodDevicesEntry]:
        """Every entry that has a response, in position order, as a checkpoint would hold it."""
        with self._sessions.snapshot() as conn:
            return [
                e.checkpoint_entry() for e in entry_store.read_entries(conn, with_response=True)
            ]

    def pod_entries(self, pod_uid: str) -> list[PodDevicesEntry]:
        """Every entry of one pod in position order, those without a response too
        (``alloc_resp`` None); [] for an unknown pod."""
        uid = validate.text(pod_uid, "pod_uid")
        with self._sessions.snapshot() as conn:
            return [
                PodDevicesEntry(
                    e.pod_uid, e.container_name, e.resource_name, e.device_ids, e.alloc_resp
                )
                for e in entry_store.read_entries(conn, uid)
            ]

    def registered_devices(self) -> dict[str, list[str]]:
        """The checkpoint's RegisteredDevices: resource → device IDs in stored order."""
        with self._sessions.use() as conn:
            stored = entry_store.current_registered(conn)
        return {resource: ids or [] for resource, ids in stored.items()}

    # ---- kubelet checkpoint files (the work is in storage/transfer.py) -----------------------

    def import_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        merge: bool = False,
        strict: bool = False,
        max_bytes: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        allow_all_skipped: bool = True,
    ) -> ImportReport:
        """Load a verified ``kubelet_internal_checkpoint`` in one transaction (docs/api.md).
        Raises the checkpoint errors or ImportRefusedError; the store is unchanged then."""
        from podstore.storage import transfer

        # Parse and verify before taking the write lock: a large file must not stall writers.
        prepared = transfer.prepare_import(
            path, strict=bool(strict), max_bytes=max_bytes, progress=progress
        )
        with self._sessions.write() as conn:
            if not allow_all_skipped:
                transfer.refuse_if_emptying(conn, prepared, merge=bool(merge))
            return transfer.load(conn, prepared, merge=bool(merge))

    def sync_checkpoint(
        self, path: str | os.PathLike[str], *, max_bytes: int | None = None
    ) -> SyncReport:
        """Bring the store to a checkpoint file's content, writing only what differs
        (docs/api.md). Raises what import raises; the store is unchanged then."""
        from podstore.storage import sync

        return sync.sync_file(self._sessions, path, max_bytes=max_bytes)

    def export_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        boot_id: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportReport:
        """Write the store as a ``kubelet_internal_checkpoint``, atomically, 0600 (docs/api.md);
        ``boot_id`` None writes the ``BootID`` the store kept, ``""`` none."""
        from podstore.storage import transfer

        if boot_id is not None:
            validate.text(boot_id, "boot_id")
        with self._sessions.snapshot() as conn:
            data, count, left_out, _ = transfer.export_bytes(conn, boot_id, progress)
        transfer.write_file(path, data)
        return ExportReport(os.path.abspath(os.fspath(path)), count, tuple(left_out))

    def export_as(
        self,
        path: str | os.PathLike[str],
        kind: str,
        format: str,
        *,
        allow_loss: bool = False,
        boot_id: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportReport:
        """Write the store's ``kind`` in ``format`` as the kubelet release that writes it does,
        atomically, 0600 (docs/api.md). When that format cannot hold all of the state, raises
        :class:`ExportRefusedError` (``.drops``) and writes nothing, unless ``allow_loss``:
        then writes without it and lists it in ``ExportReport.dropped``. ``boot_id``: device
        checkpoints only, and no BootID unless given (no release writes one)."""
        from podstore.checkpoint.downgrade import check_format
        from podstore.checkpoint.files import write_checkpoint_file
        from podstore.checkpoint.kinds import read_node_checkpoint
        from podstore.errors import ExportRefusedError
        from podstore.storage import transfer
        from podstore.storage.node import export as node_export

        kind = validate.text(kind, "kind")
        check_format(kind, validate.text(format, "format"))
        if boot_id is not None:
            validate.text(boot_id, "boot_id")
            if kind != "devices":
                raise InvalidInputError("boot_id is for device checkpoints")
        left_out: list[SkippedEntry] = []
        with self._sessions.snapshot() as conn:
            if kind == "devices":
                data, count, left_out, drops = transfer.export_bytes(
                    conn, boot_id, progress, format
                )
            else:
                data, drops = node_export.export_bytes_as(conn, kind, format)
                count = read_node_checkpoint(data, kind).entries
        if drops and not allow_loss:
            raise ExportRefusedError(
                f"the {kind} checkpoint in format {format} cannot hold all of the store's "
                f"state; writing it would lose: {'; '.join(drops)}. Nothing was written",
                drops=tuple(drops),
            )
        write_checkpoint_file(path, data)
        return ExportReport(
            os.path.abspath(os.fspath(path)), count, tuple(left_out), format, tuple(drops)
        )

    # ---- the node's other managers, topology and names (storage/node/, docs/api.md) ----------

    def import_node_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        kind: str = "auto",
        max_bytes: int | None = None,
    ) -> NodeSyncReport:
        """Bring the CPU, memory or DRA manager state to a file's. Raises what
        ``read_node_checkpoint`` raises, or InvalidInputError; nothing changes then."""
        from podstore.storage.node import sync as node_sync

        prepared = node_sync.prepare(path, kind, max_bytes=max_bytes)
        return self._apply_node(prepared)

    def export_node_checkpoint(self, path: str | os.PathLike[str], kind: str) -> int:
        """Write the store's ``kind`` as kubelet would, atomically, 0600; returns its entries.
        InvalidInputError when the store holds none or what the format cannot carry."""
        from podstore.checkpoint.files import write_checkpoint_file
        from podstore.checkpoint.kinds import read_node_checkpoint

        data = self.node_checkpoint_bytes(kind)
        count = read_node_checkpoint(data, kind).entries
        write_checkpoint_file(path, data)
        return count

    def node_checkpoint_bytes(self, kind: str) -> bytes:
        """The bytes :meth:`export_node_checkpoint` writes."""
        from podstore.storage.node import export as node_export

        with self._sessions.snapshot() as conn:
            return node_export.export_bytes(conn, _node_kind(kind))

    def cpu_state(self) -> CPUManagerState | None:
        """The CPU manager state held (None: none loaded); ``checksum`` 0: export computes it."""
        from podstore.storage.node import cpu as node_cpu

        with self._sessions.snapshot() as conn:
            return node_cpu.read_state(conn)

    def memory_state(self) -> MemoryManagerState | None:
        """The memory manager state the store holds (None: none was loaded)."""
        from podstore.storage.node import memory as node_memory

        with self._sessions.snapshot() as conn:
            return node_memory.read_state(conn)

    def dra_state(self) -> DRAState | None:
        """The DRA manager state the store holds (None: none was loaded)."""
        with self._sessions.snapshot() as conn:
            return node_dra.read_state(conn)

    def set_cpu_state(self, state: CPUManagerState) -> NodeSyncReport:
        """Bring the CPU manager state to ``state``; InvalidInputError for a wrong value."""
        return self._set_node_state("cpu", state)

    def set_memory_state(self, state: MemoryManagerState) -> NodeSyncReport:
        """Bring the memory manager state to ``state``."""
        return self._set_node_state("memory", state)

    def set_dra_state(self, state: DRAState) -> NodeSyncReport:
        """Bring the DRA manager state to ``state``."""
        return self._set_node_state("dra", state)

    def _set_node_state(self, kind: str, state: Any) -> NodeSyncReport:
        from podstore.checkpoint.kinds import read_node_checkpoint
        from podstore.storage.node import export as node_export
        from podstore.storage.node import sync as node_sync

        prepared = node_sync.prepared_state(kind, state)
        # What a file of it would say: the writer refuses what kubelet could not have written.
        read_node_checkpoint(node_export.checkpoint_bytes(kind, state), kind)
        return self._apply_node(prepared)

    def _apply_node(self, prepared: node_sync.PreparedNode) -> NodeSyncReport:
        from podstore.storage.node import sync as node_sync

        with self._sessions.write() as conn:
            return node_sync.apply(conn, prepared)

    def numa_topology(self) -> NumaTopology | None:
        """The node's CPU → NUMA node topology as loaded (None: unknown)."""
        with self._sessions.snapshot() as conn:
            return numa_and_names.read_topology(conn)

    def set_numa_topology(self, topology: NumaTopology | None) -> NodeSyncReport:
        """Replace the topology (None: unknown), one event per NUMA node that changed."""
        from podstore.storage.node import sync as node_sync

        if topology is not None and not isinstance(topology, NumaTopology):
            raise InvalidInputError(f"topology: expected a NumaTopology, got {topology!r:.80}")
        items = numa_and_names.topology_items(topology)
        with self._sessions.write() as conn:
            return node_sync.apply_topology_or_names(
                conn, "topology", numa_and_names.TOPOLOGY, items, None
            )

    def set_pod_names(self, names: Mapping[str, PodName] | PodNames) -> NodeSyncReport:
        """Replace the pod names, one event per name that came, changed or went."""
        from podstore.storage.node import sync as node_sync

        pods = names.pods if isinstance(names, PodNames) else names
        if not isinstance(pods, Mapping):
            raise InvalidInputError(f"names: expected a mapping, got {type(pods).__name__}")
        checked = {}
        for uid, name in pods.items():
            if not isinstance(name, PodName):
                raise InvalidInputError(f"names[{uid!r}]: expected a PodName, got {name!r:.80}")
            checked[validate.text(uid, "names key")] = PodName(
                validate.text(name.namespace, "namespace"), validate.text(name.name, "name")
            )
        items = numa_and_names.name_items(PodNames(checked))
        with self._sessions.write() as conn:
            return node_sync.apply_topology_or_names(
                conn, "names", numa_and_names.NAMES, items, None
            )

    def import_node(
        self,
        kubelet_dir: str | os.PathLike[str] = DEFAULT_KUBELET_DIR,
        *,
        sysfs: str | os.PathLike[str] = DEFAULT_SYSFS,
        pod_logs: str | os.PathLike[str] = DEFAULT_POD_LOGS,
        cdi_dirs: Sequence[str | os.PathLike[str]] | None = None,
        max_bytes: int | None = None,
    ) -> NodeImportReport:
        """Load the node's checkpoints, topology, pod names and CDI specs (``cdi_dirs``,
        default ``/etc/cdi`` and ``/var/run/cdi``) in one transaction (docs/api.md). Raises
        what a failing file raises, or CheckpointNotFoundError; nothing changes then."""
        from podstore.checkpoint.cdi_specs import DEFAULT_CDI_DIRS
        from podstore.storage.node import import_dir

        dirs = DEFAULT_CDI_DIRS if cdi_dirs is None else tuple(os.fspath(d) for d in cdi_dirs)
        prepared = import_dir.prepare(
            kubelet_dir, sysfs, pod_logs, cdi_dirs=dirs, max_bytes=max_bytes
        )
        with self._sessions.write() as conn:
            return import_dir.apply(conn, prepared)

    def set_cdi_specs(self, specs: CdiSpecs) -> CdiReport:
        """Bring the stored CDI devices to ``specs`` (``read_cdi_specs``); what an absent
        directory or an unreadable spec gave before stays."""
        from podstore.checkpoint.cdi_specs import CdiSpecs
        from podstore.storage.node import cdi

        if not isinstance(specs, CdiSpecs):
            raise InvalidInputError(f"specs: expected CdiSpecs, got {type(specs).__name__}")
        with self._sessions.write() as conn:
            return cdi.apply(conn, specs)

    def topology(self) -> list[NumaUsage]:
        """The node's picture per NUMA node, with holders (``podstore topology``)."""
        with self._sessions.snapshot() as conn:
            return node_topology.summary(conn)

    def node_pods(self) -> list[NodePodSummary]:
        """Every pod holding exclusive CPUs, memory or DRA claims, in uid order."""
        return [
            NodePodSummary(str(p), int(c), int(m), int(d), int(n))
            for p, c, m, d, n in self._rows(node_read_sql.NODE_PODS)
        ]

    def pod_cpus(self, pod_uid: str) -> dict[str | None, frozenset[int]]:
        """Container → the exclusive CPUs it holds (None: the pod's own cpuset)."""
        uid = validate.text(pod_uid, "pod_uid")
        with self._sessions.snapshot() as conn:
            return node_read.pod_cpus(conn, uid)

    def pod_memory(self, pod_uid: str) -> dict[str | None, list[MemoryBlock]]:
        """Container → its memory blocks (None: the pod's own)."""
        uid = validate.text(pod_uid, "pod_uid")
        with self._sessions.snapshot() as conn:
            return node_read.pod_memory(conn, uid)

    def pod_claims(self, pod_uid: str) -> list[DRAClaim]:
        """The DRA claims the pod uses, in list order."""
        uid = validate.text(pod_uid, "pod_uid")
        with self._sessions.snapshot() as conn:
            return node_read.pod_claims(conn, uid)

    def dra_owners(self, device: str) -> list[DRAOwner]:
        """Who uses the DRA device ``driver/pool/device`` now, per pod and claim; raises
        InvalidInputError for another form of name."""
        parts = node_dra.split_device_key(validate.text(device, "device"))
        if parts is None:
            raise InvalidInputError(f"device: expected driver/pool/device, got {device!r}")
        driver, pool, name = parts
        params = {"driver": driver, "pool": pool, "device": name}
        return [DRAOwner(*r) for r in self._rows(node_read_sql.DRA_OWNERS, params)]

    def dra_owners_at(self, device: str, when: TimeArg) -> list[DRAOwner]:
        """Who used the DRA device ``driver/pool/device`` at ``when``, from the history."""
        name = validate.text(device, "device")
        if node_dra.split_device_key(name) is None:
            raise InvalidInputError(f"device: expected driver/pool/device, got {device!r}")
        cut = parse_time(when, "when")
        with self._sessions.snapshot() as conn:
            return [DRAOwner(*r) for r in node_read.dra_owners_at(conn, name, cut)]

    def pod_names(self, *, past: bool = False) -> dict[str, PodName]:
        """Pod UID → name where known; ``past=True`` adds the last recorded of deleted pods."""
        with self._sessions.snapshot() as conn:
            names = numa_and_names.read_names(conn).pods
            if past:
                names = {**numa_and_names.past_names(conn), **names}
            return names

    def container_numa(self, *, misaligned: bool = False) -> list[ContainerNuma]:
        """The rows of ``v_container_numa`` (``misaligned=True``: ``v_numa_misaligned``)."""
        sql = node_read_sql.MISALIGNED if misaligned else node_read_sql.CONTAINER_NUMA
        return [node_read.container_numa(r) for r in self._rows(sql)]

    # ---- audits: history and read-only SQL (docs/sql.md) -------------------------------------

    def history(
        self,
        pod_uid: str | None = None,
        device_id: str | None = None,
        since: TimeArg | None = None,
        until: TimeArg | None = None,
    ) -> list[AllocationEvent]:
        """History events, oldest first, filtered by pod, device and [since, until) (datetimes,
        naive = UTC, or ISO 8601)."""
        sql, params = history_query(pod_uid, device_id, since, until)
        return [events.to_event(r) for r in self._rows(sql, params)]

    def owners_at(self, device_id: str, when: TimeArg) -> list[tuple[str, str, str]]:
        """(pod UID, container, resource) of every entry listing ``device_id`` at ``when``,
        sorted, from the history."""
        params = {
            "device_id": validate.text(device_id, "device_id"),
            "when": parse_time(when, "when"),
        }
        return [(r[0], r[1], r[2]) for r in self._rows(events_sql.OWNERS_AT, params)]

    def record_ends(self, evidence: Iterable[tuple[str, str | None, str, TimeArg]]) -> int:
        """Record end evidence ``(pod_uid, container or None for the whole pod, source, at)``
        in one transaction: an ``end`` event for each holder it ends sooner than the history
        says (docs/sql.md, "v_allocation_intervals"); returns how many were written.

        Raises InvalidInputError for a source other than ``runtime``, ``cpu``, ``memory`` or
        ``pod-logs``, or a bad time (nothing written).
        """
        from podstore.storage import ends

        checked = [
            ends.Evidence(
                validate.text(pod, "pod_uid"),
                None if container is None else validate.text(container, "container"),
                source,
                parse_time(at, "at"),
            )
            for pod, container, source, at in evidence
        ]
        bad = [e.source for e in checked if e.source not in ends.RECORDED_SOURCES]
        if bad:
            raise InvalidInputError(
                f"end source must be one of {', '.join(ends.RECORDED_SOURCES)}, not {bad[0]!r}"
            )
        if not checked:
            return 0
        with self._sessions.write() as conn:
            return ends.record(conn, checked)[0]

    def prune_history(self, before: TimeArg) -> int:
        """Remove history events older than ``before``, but the latest per live entry and
        registered resource (docs/api.md); returns how many went."""
        cut = parse_time(before, "before")
        with self._sessions.write() as conn:
            return events.prune(conn, cut)

    def verify_history(self) -> HistoryReport:
        """Check the history's hash chain (read-only): ``report.ok``, else ``report.breaks``."""
        with self._sessions.snapshot() as conn:
            return history_chain.verify(conn)

    def query(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        """Run one read-only statement on committed data. Raises ReadOnlyStoreError for a write,
        InvalidInputError for bad SQL, QueryLimitError past ``timeout`` or ``max_rows``."""
        limits = Limits(timeout, max_rows)
        self._check_open()
        return readonly_sql.run(self._sessions.options, sql, params, limits)

    def reader(self, *, timeout: float | None = None, max_rows: int | None = None) -> Reader:
        """A read-only snapshot (use it in ``with``) whose statements stream their rows;
        QueryLimitError past ``timeout`` (all its statements) or ``max_rows`` (each)."""
        limits = Limits(timeout, max_rows)
        self._check_open()
        return Reader(self._sessions.options, limits)

    def stream(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        max_rows: int | None = None,
    ) -> RowStream[tuple[Any, ...]]:
        """:meth:`query` streamed (a RowStream to close); its errors, QueryLimitError also
        while iterating."""
        limits = Limits(timeout, max_rows)
        self._check_open()
        reader = Guarded(self._sessions.options, limits, snapshot=False)
        try:
            rows = reader.rows(sql, params)
        except BaseException:
            reader.close()
            raise
        rows.on_close(reader.close)
        return rows

    def _check_open(self) -> None:
        if self._sessions.closed:
            raise PodStoreError("the store is closed")

    def stats(self) -> StoreStats:
        """The store's counts (:class:`StoreStats`)."""
        return StoreStats(*self._rows(q.COUNTS)[0])


def sessions_of(store: PodStore) -> Sessions:
    """The store's connections, for a follower's syncs (``watch/``), which write through
    storage/ directly."""
    return store._sessions


def _node_kind(kind: object) -> str:
    from podstore.storage.node import sync as node_sync

    if kind not in node_sync.KINDS:
        raise InvalidInputError(f"kind must be cpu, memory or dra, not {kind!r}")
    return str(kind)
