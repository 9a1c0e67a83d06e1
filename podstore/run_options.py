"""Merging a container's plugin responses into runtime settings (deviceRunContainerOptions).

Upstream walks resources and map keys in Go's random order, so "first wins" is random there.
Here the order is fixed (api.md): resources in ascending byte order, env and annotation keys of
one response in ascending order, list fields in list order. The first value for a key wins; a
later, different value is a conflict, logged as kubelet logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from podstore import cdi, codec
from podstore.types import (
    Annotation,
    CDIDevice,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    Mount,
)

log = logging.getLogger("podstore")


def merge(
    pod_uid: str,
    container_name: str,
    responses: Iterable[tuple[str, bytes | None]],
    *,
    cdi_devices: bool = True,
    cdi_annotations: bool = False,
) -> DeviceRunContainerOptions:
    """Merge ``(resource, alloc_resp bytes)`` pairs, already sorted by resource."""
    opts = DeviceRunContainerOptions()
    envs: dict[str, str] = {}
    device_paths: dict[str, str] = {}
    mount_paths: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi_seen: set[str] = set()
    cdi_names: list[str] = []
    for resource, raw in responses:
        if raw is None:
            # A nil response would crash upstream; there is nothing to merge from it.
            continue
        resp = codec.decode(raw)
        for name in sorted(resp.envs):
            value = resp.envs[name]
            if _first(envs, name, value, "env", resource):
                opts.envs.append(EnvVar(name, value))
        for dev in resp.devices:
            if _first(device_paths, dev.container_path, dev.host_path, "device", resource):
                opts.devices.append(DeviceInfo(dev.host_path, dev.container_path, dev.permissions))
        for mnt in resp.mounts:
            if _first(mount_paths, mnt.container_path, mnt.host_path, "mount", resource):
                opts.mounts.append(
                    Mount(
                        name=mnt.container_path,
                        container_path=mnt.container_path,
                        host_path=mnt.host_path,
                        read_only=mnt.read_only,
                        selinux_relabel=False,
                    )
                )
        for key in sorted(resp.annotations):
            value = resp.annotations[key]
            if _first(annotations, key, value, "annotation", resource):
                opts.annotations.append(Annotation(key, value))
        for cdi_dev in resp.cdi_devices:
            if cdi_dev.name in cdi_seen:
                continue
            cdi_seen.add(cdi_dev.name)
            cdi_names.append(cdi_dev.name)
            if cdi_devices:
                opts.cdi_devices.append(CDIDevice(cdi_dev.name))
    if cdi_annotations:
        for key, value in cdi.generate_annotations(pod_uid, container_name, cdi_names):
            if _first(annotations, key, value, "annotation", "CDI"):
                opts.annotations.append(Annotation(key, value))
    return opts


def _first(seen: dict[str, str], key: str, value: str, kind: str, resource: str) -> bool:
    """Record key=value if the key is new; True when it should be appended."""
    prior = seen.get(key)
    if prior is None:
        seen[key] = value
        return True
    if prior != value:
        log_conflict(kind, key, prior, value, resource)
    return False


def log_conflict(kind: str, key: str, kept: str, dropped: str, resource: str) -> None:
    """Log one conflicting setting (also used by the SQL merge in responses.py)."""
    # kubelet logs these at error level.
    log.error(
        "conflicting setting for %s %r: %r kept, %r from %s dropped",
        kind,
        key,
        kept,
        dropped,
        resource,
    )
