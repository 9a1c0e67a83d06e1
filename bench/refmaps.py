"""kubelet's in-memory ``podDevices``, as nested dicts (the kubelet-style and in-memory baselines).

Shaped like upstream ``pod_devices.go``: pod → container → resource → (DevicesPerNUMA, the
decoded ``ContainerAllocateResponse``). Lookups are dict hits, ``devices()`` walks everything,
``to_checkpoint_data`` marshals every response again (as kubelet does on each write) and
``from_checkpoint_data`` unmarshals each one. The deterministic orders of api.md are followed
where they are cheap, so answers compare equal with podstore's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from podstore import (
    Annotation,
    CDIDevice,
    ContainerAllocateResponse,
    Device,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    Mount,
    NUMANode,
    PodDevicesEntry,
    ResourceDeviceInstances,
    TopologyInfo,
)

DevicesPerNUMA = dict[int, list[str] | None]


@dataclass(slots=True)
class DeviceAllocateInfo:
    """upstream ``deviceAllocateInfo``."""

    device_ids: DevicesPerNUMA | None
    alloc_resp: ContainerAllocateResponse


ResourceAllocateInfo = dict[str, DeviceAllocateInfo]
ContainerDevices = dict[str, ResourceAllocateInfo]


def _ids(info: DeviceAllocateInfo) -> set[str]:
    out: set[str] = set()
    for ids in (info.device_ids or {}).values():
        if ids:
            out.update(ids)
    return out


class PodDevicesMaps:
    """podDevices in memory: every read is a dict look-up, nothing is durable."""

    def __init__(self) -> None:
        self.devs: dict[str, ContainerDevices] = {}

    def pods(self) -> set[str]:
        return set(self.devs)

    def insert(
        self,
        pod_uid: str,
        container_name: str,
        resource_name: str,
        devices: Mapping[int, Sequence[str] | None] | None,
        alloc_resp: ContainerAllocateResponse,
    ) -> None:
        per_numa = (
            None
            if devices is None
            else {n: None if ids is None else list(ids) for n, ids in devices.items()}
        )
        containers = self.devs.setdefault(pod_uid, {})
        containers.setdefault(container_name, {})[resource_name] = DeviceAllocateInfo(
            per_numa, alloc_resp
        )

    def delete(self, pod_uids: Iterable[str]) -> None:
        for uid in pod_uids:
            self.devs.pop(uid, None)

    def container_devices(
        self, pod_uid: str, container_name: str, resource_name: str
    ) -> set[str] | None:
        info = self.devs.get(pod_uid, {}).get(container_name, {}).get(resource_name)
        return None if info is None else _ids(info)

    def pod_devices(self, pod_uid: str, resource_name: str) -> set[str]:
        out: set[str] = set()
        for resources in self.devs.get(pod_uid, {}).values():
            info = resources.get(resource_name)
            if info is not None:
                out |= _ids(info)
        return out

    def devices(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for containers in self.devs.values():
            for resources in containers.values():
                for resource, info in resources.items():
                    out.setdefault(resource, set()).update(_ids(info))
        return out

    def get_container_devices(
        self, pod_uid: str, container_name: str
    ) -> ResourceDeviceInstances | None:
        resources = self.devs.get(pod_uid, {}).get(container_name)
        if resources is None:
            return None
        out = ResourceDeviceInstances()
        for resource, info in resources.items():
            if not info.device_ids:
                continue
            nodes: dict[str, set[int]] = {}
            for node, ids in info.device_ids.items():
                for dev in ids or ():
                    seen = nodes.setdefault(dev, set())
                    if node != -1:
                        seen.add(node)
            instances = out.setdefault(resource, {})
            for dev, numa in nodes.items():
                device = Device()
                if numa:
                    device.topology.CopyFrom(
                        TopologyInfo(nodes=[NUMANode(ID=n) for n in sorted(numa)])
                    )
                instances[dev] = device
        return out

    def get_pod_and_container_for_device(self, device_id: str) -> tuple[str, str] | None:
        for pod_uid, containers in self.devs.items():
            for container_name, resources in containers.items():
                for info in resources.values():
                    for ids in (info.device_ids or {}).values():
                        if ids and device_id in ids:
                            return pod_uid, container_name
        return None

    def device_run_container_options(
        self, pod_uid: str, container_name: str
    ) -> DeviceRunContainerOptions | None:
        resources = self.devs.get(pod_uid, {}).get(container_name)
        if resources is None:
            return None
        opts = DeviceRunContainerOptions()
        envs: dict[str, str] = {}
        paths: dict[str, str] = {}
        mounts: dict[str, str] = {}
        annotations: dict[str, str] = {}
        cdi: set[str] = set()
        for resource in sorted(resources):
            resp = resources[resource].alloc_resp
            for name in sorted(resp.envs):
                if name not in envs:
                    envs[name] = resp.envs[name]
                    opts.envs.append(EnvVar(name, resp.envs[name]))
            for dev in resp.devices:
                if dev.container_path not in paths:
                    paths[dev.container_path] = dev.host_path
                    opts.devices.append(
                        DeviceInfo(dev.host_path, dev.container_path, dev.permissions)
                    )
            for mnt in resp.mounts:
                if mnt.container_path not in mounts:
                    mounts[mnt.container_path] = mnt.host_path
                    opts.mounts.append(
                        Mount(mnt.container_path, mnt.container_path, mnt.host_path, mnt.read_only)
                    )
            for key in sorted(resp.annotations):
                if key not in annotations:
                    annotations[key] = resp.annotations[key]
                    opts.annotations.append(Annotation(key, resp.annotations[key]))
            for c in resp.cdi_devices:
                if c.name not in cdi:
                    cdi.add(c.name)
                    opts.cdi_devices.append(CDIDevice(c.name))
        return opts

    def to_checkpoint_data(self) -> list[PodDevicesEntry]:
        """Every entry, its response marshalled again (kubelet's toCheckpointData)."""
        out: list[PodDevicesEntry] = []
        for pod_uid, containers in self.devs.items():
            for container_name, resources in containers.items():
                for resource, info in resources.items():
                    out.append(
                        PodDevicesEntry(
                            pod_uid,
                            container_name,
                            resource,
                            info.device_ids,
                            info.alloc_resp.SerializeToString(),
                        )
                    )
        return out

    def from_checkpoint_data(self, entries: Iterable[PodDevicesEntry]) -> None:
        """Unmarshal each response and insert (kubelet's fromCheckpointData)."""
        for e in entries:
            resp = ContainerAllocateResponse()
            resp.ParseFromString(e.alloc_resp or b"")
            self.insert(e.pod_uid, e.container_name, e.resource_name, e.device_ids, resp)
