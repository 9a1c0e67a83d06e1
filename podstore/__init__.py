"""podstore: a crash-safe SQLite store of kubelet device-manager allocations.

The public names are re-exported here and nowhere else (plus the documented modules
``podstore.checkpoint`` and ``podstore.deviceplugin``); see docs/api.md. Every other module is
internal: ``rules/``, ``sqlite/``, ``storage/`` and ``cli/`` may change between releases.
"""

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
    DeviceHolding,
    DeviceInfo,
    DeviceOwner,
    DeviceRunContainerOptions,
    EnvVar,
    HistoryReport,
    ImportReport,
    Mount,
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

__all__ = [
    "NO_TOPOLOGY",
    "AllocateResponse",
    "AllocationEvent",
    "Annotation",
    "CDIDevice",
    "ChainBreak",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointNotFoundError",
    "ContainerAllocateResponse",
    "Device",
    "DeviceHolding",
    "DeviceInfo",
    "DeviceOwner",
    "DeviceRunContainerOptions",
    "DeviceSpec",
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
    "check_store",
    "replay_history",
]
