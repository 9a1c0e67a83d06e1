"""Merging a container's plugin responses into runtime settings (deviceRunContainerOptions).

Upstream walks resources and map keys in Go's random order, so "first wins" is random there;
here the order is fixed (api.md), and a later, different value is a conflict, logged as kubelet
logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from podstore.errors import StoreCorruptError
from podstore.pure import alloc_resp, cdi
from podstore.types import (
    Annotation,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    RuntimeCDIDevice,
    RuntimeMount,
)

log = logging.getLogger("podstore")

#: Kind names as the audit views show them, in the order one response's sections are merged.
KINDS = ("env", "device", "mount", "annotation", "cdi")


class OptionsBuilder:
    """Collects the kept settings of one container, in merge order, as runtime types.

    Both merges use it: :func:`merge` (the Python reference) decides which settings win, and
    the SQL merge (``storage/responses.shape``) is handed only the winners.
    """

    def __init__(self, *, cdi_devices: bool) -> None:
        self.options = DeviceRunContainerOptions()
        self._cdi_devices = cdi_devices
        self._annotations: dict[str, str] = {}
        self._cdi_names: list[str] = []

    def env(self, name: str, value: str) -> None:
        self.options.envs.append(EnvVar(name, value))

    def device(self, container_path: str, host_path: str, permissions: str) -> None:
        self.options.devices.append(DeviceInfo(host_path, container_path, permissions))

    def mount(self, container_path: str, host_path: str, read_only: bool) -> None:
        self.options.mounts.append(
            RuntimeMount(
                name=container_path,
                container_path=container_path,
                host_path=host_path,
                read_only=bool(read_only),
                selinux_relabel=False,
            )
        )

    def annotation(self, key: str, value: str) -> None:
        self._annotations[key] = value
        self.options.annotations.append(Annotation(key, value))

    def cdi_device(self, name: str) -> None:
        self._cdi_names.append(name)
        if self._cdi_devices:
            self.options.cdi_devices.append(RuntimeCDIDevice(name))

    def finish(
        self, pod_uid: str, container_name: str, *, cdi_annotations: bool
    ) -> DeviceRunContainerOptions:
        """The options, with kubelet 1.28–1.31's CDI annotation added when asked (a plugin's
        annotation of the same key wins)."""
        if cdi_annotations:
            generated = cdi.generate_annotations(pod_uid, container_name, self._cdi_names)
            for key, value in generated:
                prior = self._annotations.get(key)
                if prior is None:
                    self.annotation(key, value)
                elif prior != value:
                    log_conflict("annotation", key, prior, value, "CDI")
        return self.options


def merge(
    pod_uid: str,
    container_name: str,
    responses: Iterable[tuple[str, bytes | None]],
    *,
    cdi_devices: bool = True,
    cdi_annotations: bool = False,
) -> DeviceRunContainerOptions:
    """Merge ``(resource, alloc_resp bytes)`` pairs, already sorted by resource."""
    out = OptionsBuilder(cdi_devices=cdi_devices)
    envs: dict[str, str] = {}
    device_paths: dict[str, str] = {}
    mount_paths: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi_seen: set[str] = set()
    for resource, raw in responses:
        if raw is None:
            # A nil response would crash upstream; there is nothing to merge from it.
            continue
        resp = alloc_resp.parse(raw)
        if isinstance(resp, str):
            raise StoreCorruptError(f"the stored AllocResp of {resource} does not decode: {resp}")
        for name, value in resp.envs:
            if _first(envs, name, value, "env", resource):
                out.env(name, value)
        for container_path, host_path, permissions in resp.devices:
            if _first(device_paths, container_path, host_path, "device", resource):
                out.device(container_path, host_path, permissions)
        for container_path, host_path, read_only in resp.mounts:
            if _first(mount_paths, container_path, host_path, "mount", resource):
                out.mount(container_path, host_path, read_only)
        for key, value in resp.annotations:
            if _first(annotations, key, value, "annotation", resource):
                out.annotation(key, value)
        for name in resp.cdi_devices:
            if name not in cdi_seen:
                cdi_seen.add(name)
                out.cdi_device(name)
    return out.finish(pod_uid, container_name, cdi_annotations=cdi_annotations)


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
    """Log one conflicting setting (also used by the SQL merge, storage/responses.py)."""
    # kubelet logs these at error level.
    log.error(
        "conflicting setting for %s %r: %r kept, %r from %s dropped",
        kind,
        key,
        kept,
        dropped,
        resource,
    )
