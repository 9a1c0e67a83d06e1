"""A plain in-memory reference model of kubelet's podDevices, and helpers to compare a store to it.

The model is deliberately naive: dicts and sets, written from kubelet-semantics.md §2–§4 plus the
deterministic rules of api.md, sharing no code with podstore beyond the protobuf messages and the
result types. Python's dict order *is* api.md's entry order: assigning to an existing key keeps its
position, deleting and re-adding a key moves it to the end.
"""

from __future__ import annotations

import copy
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from podstore import (
    Annotation,
    ContainerAllocateResponse,
    DeviceInfo,
    DeviceRunContainerOptions,
    EnvVar,
    PodDevicesEntry,
    PodStore,
    RuntimeCDIDevice,
    RuntimeMount,
)
from podstore.deviceplugin import CDIDevice, DeviceSpec, Mount

Key = tuple[str, str, str]
PerNUMA = dict[int, list[str] | None]
#: resource → device ID → sorted NUMA nodes, or None for "no topology".
TopologyView = dict[str, dict[str, tuple[int, ...] | None]]


def resp(
    envs: Mapping[str, str] | None = None,
    mounts: Sequence[tuple[str, str, bool]] = (),
    devices: Sequence[tuple[str, str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    cdi: Sequence[str] = (),
) -> ContainerAllocateResponse:
    """A ContainerAllocateResponse: mounts as (container, host, ro), devices as (container,
    host, permissions)."""
    msg = ContainerAllocateResponse()
    msg.envs.update(envs or {})
    msg.annotations.update(annotations or {})
    for container_path, host_path, read_only in mounts:
        msg.mounts.append(
            Mount(container_path=container_path, host_path=host_path, read_only=read_only)
        )
    for container_path, host_path, permissions in devices:
        msg.devices.append(
            DeviceSpec(container_path=container_path, host_path=host_path, permissions=permissions)
        )
    for name in cdi:
        msg.cdi_devices.append(CDIDevice(name=name))
    return msg


def decodes(data: bytes) -> bool:
    try:
        ContainerAllocateResponse().ParseFromString(data)
    except DecodeError:
        return False
    return True


def topology_view(rdi: Mapping[str, Mapping[str, Any]]) -> TopologyView:
    """get_container_devices' answer reduced to what it means: nodes per device."""
    return {
        res: {
            dev_id: (
                tuple(int(n.ID) for n in dev.topology.nodes) if dev.HasField("topology") else None
            )
            for dev_id, dev in instances.items()
        }
        for res, instances in rdi.items()
    }


@dataclass
class RefEntry:
    devices: PerNUMA | None
    resp: bytes | None
    resp_json_null: bool = False

    def ids(self) -> set[str]:
        out: set[str] = set()
        for ids in (self.devices or {}).values():
            out.update(ids or ())
        return out


ANNOTATION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
CDI_NAME = re.compile(
    r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"  # vendor
    r"/[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?"  # class
    r"=[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"  # device name
)


def cdi_annotation(pod: str, container: str, names: Iterable[str]) -> tuple[str, str] | None:
    """kubelet 1.28–1.31's CDI annotation for a container, or None when it would make none."""
    ordered = sorted(names)
    if not ordered:
        return None
    name = ("devicemanager_" + pod + "-" + container).replace("/", "_")
    if len(name) > 63 or not ANNOTATION_NAME.fullmatch(name):
        return None
    if not all(CDI_NAME.fullmatch(n) for n in ordered):
        return None
    return "cdi.k8s.io/" + name, ",".join(ordered)


class RefModel:
    """podDevices as nested Python data, ordered as api.md orders entries."""

    def __init__(self) -> None:
        self.entries: dict[Key, RefEntry] = {}
        self.registered: dict[str, list[str]] = {}

    def copy(self) -> RefModel:
        return copy.deepcopy(self)

    # ---- writes ---------------------------------------------------------------------------

    @staticmethod
    def _per_numa(devices: Mapping[int, Iterable[str] | None] | None) -> PerNUMA | None:
        if devices is None:
            return None
        out: PerNUMA = {}
        for node, ids in devices.items():
            if ids is None:
                out[node] = None
            elif isinstance(ids, (set, frozenset)):
                out[node] = sorted(ids)
            else:
                out[node] = list(ids)
        return out

    def insert(
        self,
        pod: str,
        container: str,
        resource: str,
        devices: Mapping[int, Iterable[str] | None] | None,
        alloc_resp: ContainerAllocateResponse | bytes | None,
        *,
        resp_json_null: bool = False,
    ) -> None:
        if isinstance(alloc_resp, ContainerAllocateResponse):
            raw: bytes | None = alloc_resp.SerializeToString(deterministic=True)
        else:
            raw = alloc_resp
        self.entries[(pod, container, resource)] = RefEntry(
            self._per_numa(devices), raw, resp_json_null
        )

    def delete(self, pods: Iterable[str]) -> None:
        gone = set(pods)
        self.entries = {k: v for k, v in self.entries.items() if k[0] not in gone}

    def from_checkpoint_data(self, entries: Iterable[PodDevicesEntry]) -> None:
        for e in entries:
            if e.alloc_resp is not None and not decodes(e.alloc_resp):
                continue  # kubelet logs and skips it
            self.insert(
                e.pod_uid,
                e.container_name,
                e.resource_name,
                e.device_ids,
                b"" if e.alloc_resp is None else bytes(e.alloc_resp),
                resp_json_null=e.alloc_resp is None,
            )

    def set_registered_devices(self, mapping: Mapping[str, Iterable[str] | None] | None) -> None:
        self.registered = {}
        for res, ids in (mapping or {}).items():
            self.registered[res] = [] if ids is None else list(ids)

    # ---- reads ----------------------------------------------------------------------------

    def pods(self) -> set[str]:
        return {k[0] for k in self.entries}

    def containers(self, pod: str) -> set[str]:
        return {k[1] for k in self.entries if k[0] == pod}

    def container_devices(self, pod: str, container: str, resource: str) -> set[str] | None:
        entry = self.entries.get((pod, container, resource))
        return None if entry is None else entry.ids()

    def pod_devices(self, pod: str, resource: str) -> set[str]:
        out: set[str] = set()
        for (p, _c, r), entry in self.entries.items():
            if p == pod and r == resource:
                out |= entry.ids()
        return out

    def _resources(self, pod: str, container: str) -> dict[str, RefEntry]:
        return {r: e for (p, c, r), e in self.entries.items() if p == pod and c == container}

    def add_container_allocated_resources(
        self, pod: str, container: str, acc: dict[str, set[str]]
    ) -> None:
        for res, entry in self._resources(pod, container).items():
            acc[res] = acc.get(res, set()) | entry.ids()

    def remove_container_allocated_resources(
        self, pod: str, container: str, acc: dict[str, set[str]]
    ) -> None:
        for res, entry in self._resources(pod, container).items():
            acc[res] = acc.get(res, set()) - entry.ids()

    def devices(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for (_p, _c, r), entry in self.entries.items():
            devs = out.setdefault(r, set())
            if entry.resp is not None:
                devs |= entry.ids()
        return out

    def get_container_devices(self, pod: str, container: str) -> TopologyView | None:
        resources = self._resources(pod, container)
        if not resources:
            return None
        out: TopologyView = {}
        for res, entry in resources.items():
            if not entry.devices:
                continue
            nodes: dict[str, set[int]] = {}
            for node, ids in entry.devices.items():
                for dev in ids or ():
                    nodes.setdefault(dev, set()).add(node)
            out[res] = {
                dev: (tuple(sorted(ns - {-1})) if ns - {-1} else None) for dev, ns in nodes.items()
            }
        return out

    def get_pod_and_container_for_device(
        self, device: str, resource: str | None = None
    ) -> tuple[str, str] | None:
        for (p, c, r), entry in self.entries.items():
            if (resource is None or r == resource) and device in entry.ids():
                return p, c
        return None

    def to_checkpoint_data(self) -> list[PodDevicesEntry]:
        return [
            PodDevicesEntry(
                p,
                c,
                r,
                copy.deepcopy(e.devices),
                # a restored JSON-null AllocResp is an empty response (kubelet-semantics.md,
                # fromCheckpointData / toCheckpointData); only an exported file writes null
                e.resp,
            )
            for (p, c, r), e in self.entries.items()
            if e.resp is not None
        ]

    def device_run_container_options(
        self,
        pod: str,
        container: str,
        *,
        cdi_devices: bool = True,
        cdi_annotations: bool = False,
    ) -> DeviceRunContainerOptions | None:
        resources = self._resources(pod, container)
        if not resources:
            return None
        opts = DeviceRunContainerOptions()
        envs: dict[str, str] = {}
        dev_paths: set[str] = set()
        mount_paths: set[str] = set()
        annotations: dict[str, str] = {}
        cdi_names: list[str] = []
        for res in sorted(resources):
            raw = resources[res].resp
            if raw is None:
                continue
            msg = ContainerAllocateResponse()
            msg.ParseFromString(raw)
            for k in sorted(msg.envs):
                if k not in envs:
                    envs[k] = msg.envs[k]
                    opts.envs.append(EnvVar(k, msg.envs[k]))
            for d in msg.devices:
                if d.container_path not in dev_paths:
                    dev_paths.add(d.container_path)
                    opts.devices.append(DeviceInfo(d.host_path, d.container_path, d.permissions))
            for m in msg.mounts:
                if m.container_path not in mount_paths:
                    mount_paths.add(m.container_path)
                    opts.mounts.append(
                        RuntimeMount(
                            m.container_path, m.container_path, m.host_path, m.read_only, False
                        )
                    )
            for k in sorted(msg.annotations):
                if k not in annotations:
                    annotations[k] = msg.annotations[k]
                    opts.annotations.append(Annotation(k, msg.annotations[k]))
            for cdi in msg.cdi_devices:
                if cdi.name not in cdi_names:
                    cdi_names.append(cdi.name)
                    if cdi_devices:
                        opts.cdi_devices.append(RuntimeCDIDevice(cdi.name))
        if cdi_annotations:
            generated = cdi_annotation(pod, container, cdi_names)
            if generated is not None and generated[0] not in annotations:
                opts.annotations.append(Annotation(*generated))
        return opts


# ---- comparing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alphabet:
    """The names a comparison probes (besides everything the model holds)."""

    pods: Sequence[str]
    containers: Sequence[str]
    resources: Sequence[str]
    devices: Sequence[str]


def assert_agrees(store: PodStore, model: RefModel, alphabet: Alphabet) -> None:
    """Every podDevices query of ``store`` answers as ``model`` does."""
    pods = sorted(set(alphabet.pods) | model.pods())
    containers = sorted(set(alphabet.containers) | {k[1] for k in model.entries})
    resources = sorted(set(alphabet.resources) | {k[2] for k in model.entries})
    devices = sorted(set(alphabet.devices) | {d for e in model.entries.values() for d in e.ids()})

    assert store.pods() == model.pods()
    assert store.size() == len(store) == len(model.pods())
    for p in pods:
        assert store.has_pod(p) == (p in store) == (p in model.pods()), p
        for r in resources:
            assert store.pod_devices(p, r) == model.pod_devices(p, r), (p, r)
        for c in containers:
            for r in resources:
                assert store.container_devices(p, c, r) == model.container_devices(p, c, r), (
                    p,
                    c,
                    r,
                )
            got = store.get_container_devices(p, c)
            want = model.get_container_devices(p, c)
            assert (None if got is None else topology_view(got)) == want, (p, c)
            for flags in ({}, {"cdi_devices": False, "cdi_annotations": True}):
                assert store.device_run_container_options(
                    p, c, **flags
                ) == model.device_run_container_options(p, c, **flags), (p, c, flags)
            acc_store: dict[str, set[str]] = {r: set(devices[:2]) for r in resources[:1]}
            acc_model = copy.deepcopy(acc_store)
            store.add_container_allocated_resources(p, c, acc_store)
            model.add_container_allocated_resources(p, c, acc_model)
            assert acc_store == acc_model, (p, c)
            store.remove_container_allocated_resources(p, c, acc_store)
            model.remove_container_allocated_resources(p, c, acc_model)
            assert acc_store == acc_model, (p, c)
    assert store.devices() == model.devices()
    assert store.to_checkpoint_data() == model.to_checkpoint_data()
    assert store.registered_devices() == model.registered
    for d in devices:
        assert store.get_pod_and_container_for_device(d) == model.get_pod_and_container_for_device(
            d
        ), d
        for r in resources:
            assert store.get_pod_and_container_for_device(
                d, r
            ) == model.get_pod_and_container_for_device(d, r), (d, r)


def table_dump(path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the SQLite file (through a separate connection), sorted."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name"
            )
        ]
        return {
            name: sorted(
                conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=lambda row: repr(row)
            )
            for name in names
        }
    finally:
        conn.close()


def store_dump(store: PodStore) -> dict[str, Any]:
    """What the public API says about the whole store plus the raw tables: equal before and
    after a call means the call changed nothing."""
    return {
        "tables": table_dump(store.path),
        "entries": store.to_checkpoint_data(),
        "devices": store.devices(),
        "pods": store.pods(),
        "registered": store.registered_devices(),
    }
