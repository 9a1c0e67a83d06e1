"""podstore: a crash-safe SQLite store of kubelet device-manager allocations.

The public names are re-exported here and nowhere else; see docs/ and the README.
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
    InvalidInputError,
    PodStoreError,
    ReadOnlyStoreError,
    SchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreFullError,
)
from podstore.store import PodStore
from podstore.types import (
    NO_TOPOLOGY,
    AllocationEvent,
    Annotation,
    CDIDevice,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    ImportReport,
    Mount,
    PodDevicesEntry,
    QueryResult,
    ResourceDeviceInstances,
    SkippedEntry,
    StoreStats,
)

__version__ = "0.1.0"

__all__ = [
    "NO_TOPOLOGY",
    "AllocateResponse",
    "AllocationEvent",
    "Annotation",
    "CDIDevice",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointFormatError",
    "ContainerAllocateResponse",
    "Device",
    "DeviceInfo",
    "DeviceRunContainerOptions",
    "DeviceSpec",
    "EnvVar",
    "ImportReport",
    "InvalidInputError",
    "Mount",
    "NUMANode",
    "PodDevicesEntry",
    "PodStore",
    "PodStoreError",
    "QueryResult",
    "ReadOnlyStoreError",
    "ResourceDeviceInstances",
    "SchemaError",
    "SkippedEntry",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreStats",
    "TopologyInfo",
    "__version__",
]
