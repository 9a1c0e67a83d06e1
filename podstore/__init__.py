"""podstore: a crash-safe SQLite store of kubelet device-manager allocations.

The public names are re-exported here and nowhere else (plus the documented modules
``podstore.checkpoint`` and ``podstore.deviceplugin``); see docs/api.md. Every other module is
internal: ``rules/``, ``sqlite/``, ``storage/`` and ``cli/`` may change between releases.
"""

from typing import TYPE_CHECKING, Any

from podstore.deviceplugin import (
    AllocateResponse,
    ContainerAllocateResponse,
    Device,
    DeviceSpec,
    NUMANode,
    TopologyInfo,
)
from podstore.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
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
from podstore.reading import Reader
from podstore.sqlite.guarded import RowStream
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

if TYPE_CHECKING:
    from podstore.aio import AsyncPodStore, AsyncReader, AsyncRowStream

__version__ = "0.1.0"

# The asyncio API loads asyncio, which a process that never uses it should not pay for at
# start-up (docs/performance.md): it is imported on first access (PEP 562).
_LAZY = {"AsyncPodStore", "AsyncReader", "AsyncRowStream"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from podstore import aio

        return getattr(aio, name)
    raise AttributeError(f"module 'podstore' has no attribute {name!r}")


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
