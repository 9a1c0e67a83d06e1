"""podstore: a crash-safe SQLite store of kubelet device-manager allocations.

The public names (docs/api.md) are re-exported here only, besides ``podstore.checkpoint`` and
``podstore.deviceplugin``; every other module is internal. Only the exception tree loads at
import: the rest on first access (PEP 562), so a process pays only for the modules it uses
(docs/performance.md, "Start-up").
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from podstore.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    ExportRefusedError,
    FleetError,
    FleetRefusedError,
    FleetUnavailableError,
    ImportRefusedError,
    InvalidInputError,
    PodStoreError,
    QueryLimitError,
    ReadOnlyStoreError,
    SchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreFullError,
)

if TYPE_CHECKING:
    from podstore.aio import AsyncPodStore, AsyncReader, AsyncRowStream
    from podstore.deviceplugin import (
        AllocateResponse,
        ContainerAllocateResponse,
        Device,
        DeviceSpec,
        NUMANode,
        TopologyInfo,
    )
    from podstore.reading import Reader
    from podstore.sqlite.readonly import RowStream
    from podstore.sqlite.signals import committed
    from podstore.storage.events import ReplayState
    from podstore.storage.events import replay as replay_history
    from podstore.storage.selfcheck import Finding, check_store
    from podstore.store import PodStore
    from podstore.types import (
        NO_TOPOLOGY,
        AllocationEvent,
        Annotation,
        CDIDevice,
        ChainBreak,
        ContainerNuma,
        DeviceHolding,
        DeviceInfo,
        DeviceOwner,
        DeviceRunContainerOptions,
        DRAOwner,
        EnvVar,
        ExportReport,
        HistoryReport,
        ImportReport,
        Mount,
        NodeImportReport,
        NodePodSummary,
        NodeSyncReport,
        NumaUsage,
        PodDevicesEntry,
        PodSummary,
        QueryResult,
        ResourceDeviceInstances,
        RuntimeCDIDevice,
        RuntimeMount,
        SkippedEntry,
        StoreStats,
        SyncReport,
    )

__version__ = "0.1.0"

#: Where each lazily loaded public name lives: module → names (the name is the module's own,
#: except where ``_RENAMED`` says otherwise). tests/test_startup.py checks it against the
#: imports above and ``__all__``.
_LAZY: dict[str, tuple[str, ...]] = {
    "podstore.aio": ("AsyncPodStore", "AsyncReader", "AsyncRowStream"),
    "podstore.deviceplugin": (
        "AllocateResponse",
        "ContainerAllocateResponse",
        "Device",
        "DeviceSpec",
        "NUMANode",
        "TopologyInfo",
    ),
    "podstore.reading": ("Reader",),
    "podstore.sqlite.readonly": ("RowStream",),
    "podstore.sqlite.signals": ("committed",),
    "podstore.storage.events": ("ReplayState", "replay_history"),
    "podstore.storage.selfcheck": ("Finding", "check_store"),
    "podstore.store": ("PodStore",),
    "podstore.types": (
        "NO_TOPOLOGY",
        "AllocationEvent",
        "Annotation",
        "CDIDevice",
        "ChainBreak",
        "ContainerNuma",
        "DeviceHolding",
        "DeviceInfo",
        "DeviceOwner",
        "DeviceRunContainerOptions",
        "DRAOwner",
        "EnvVar",
        "ExportReport",
        "HistoryReport",
        "ImportReport",
        "Mount",
        "NodeImportReport",
        "NodePodSummary",
        "NodeSyncReport",
        "NumaUsage",
        "PodDevicesEntry",
        "PodSummary",
        "QueryResult",
        "ResourceDeviceInstances",
        "RuntimeCDIDevice",
        "RuntimeMount",
        "SkippedEntry",
        "StoreStats",
        "SyncReport",
    ),
}
_RENAMED = {"replay_history": "replay"}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'podstore' has no attribute {name!r}")
    value = getattr(import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # the next access is a plain look-up
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


__all__ = [
    "NO_TOPOLOGY",
    "AllocateResponse",
    "AllocationEvent",
    "Annotation",
    "AsyncPodStore",
    "AsyncReader",
    "AsyncRowStream",
    "CDIDevice",
    "ChainBreak",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointNotFoundError",
    "ExportRefusedError",
    "ContainerAllocateResponse",
    "ContainerNuma",
    "Device",
    "DeviceHolding",
    "DeviceInfo",
    "DeviceOwner",
    "DeviceRunContainerOptions",
    "DeviceSpec",
    "DRAOwner",
    "EnvVar",
    "Finding",
    "FleetError",
    "FleetRefusedError",
    "FleetUnavailableError",
    "HistoryReport",
    "ImportRefusedError",
    "ExportReport",
    "ImportReport",
    "InvalidInputError",
    "Mount",
    "NUMANode",
    "NodeImportReport",
    "NodePodSummary",
    "NodeSyncReport",
    "NumaUsage",
    "PodDevicesEntry",
    "PodSummary",
    "PodStore",
    "PodStoreError",
    "QueryLimitError",
    "QueryResult",
    "ReadOnlyStoreError",
    "Reader",
    "ReplayState",
    "ResourceDeviceInstances",
    "RowStream",
    "RuntimeCDIDevice",
    "RuntimeMount",
    "SchemaError",
    "SkippedEntry",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreStats",
    "SyncReport",
    "TopologyInfo",
    "__version__",
    "committed",
    "check_store",
    "replay_history",
]
