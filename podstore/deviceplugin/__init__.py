"""Device plugin API v1beta1 messages, wire compatible with kubelet's."""

from podstore.deviceplugin.api_pb2 import (
    AllocateRequest,
    AllocateResponse,
    CDIDevice,
    ContainerAllocateRequest,
    ContainerAllocateResponse,
    Device,
    DevicePluginOptions,
    DeviceSpec,
    ListAndWatchResponse,
    Mount,
    NUMANode,
    TopologyInfo,
)

__all__ = [
    "AllocateRequest",
    "AllocateResponse",
    "CDIDevice",
    "ContainerAllocateRequest",
    "ContainerAllocateResponse",
    "Device",
    "DevicePluginOptions",
    "DeviceSpec",
    "ListAndWatchResponse",
    "Mount",
    "NUMANode",
    "TopologyInfo",
]
