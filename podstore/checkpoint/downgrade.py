"""A state made ready for a format other than the one it was read in, and what that format
cannot hold: the step behind ``podstore export --kubelet-version`` (docs/kubelet-releases.md
§§2–5 say which release reads and writes which format).

Each function returns the state as the target format's writer takes it and the list of what
was left out (``[]``: nothing), worded for a person; the caller decides whether to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from podstore.checkpoint.cpu_state import LEGACY_TYPE_NAME, CPUManagerState
from podstore.checkpoint.dra_types import API_VERSION, KIND, DRAClaim, DRAState
from podstore.checkpoint.memory_state import MemoryManagerState
from podstore.errors import InvalidInputError
from podstore.types import PodDevicesEntry

#: The formats podstore writes per kind, as ``verify-checkpoint`` labels them. DRA ``v1`` is
#: kubelet 1.31's (devices per driver); 1.27–1.30's layouts are not written.
FORMATS: dict[str, tuple[str, ...]] = {
    "devices": ("v1", "v2"),
    "cpu": ("v2", "v3", "v4"),
    "memory": ("v1", "v2", "v3"),
    "dra": ("v1", "data"),
}


def check_format(kind: str, fmt: str) -> str:
    """``fmt`` if podstore writes it for ``kind``; else InvalidInputError naming those it does."""
    known = FORMATS.get(kind)
    if known is None:
        raise InvalidInputError(f"kind must be one of {', '.join(FORMATS)}, not {kind!r}")
    if fmt not in known:
        raise InvalidInputError(
            f"format {fmt!r} is not written for {kind} (written: {', '.join(known)})"
        )
    return fmt


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def cpu_state_as(state: CPUManagerState, fmt: str) -> tuple[CPUManagerState, list[str]]:
    """The CPU state for ``fmt``: v2 and v3 hashed under the legacy type name and v4 with an
    embedded v2 copy, as releases write them; v2 loses the pods' own CPUs (``podEntries``)."""
    check_format("cpu", fmt)
    drops: list[str] = []
    pods = state.pod_entries
    if fmt == "v2" and pods:
        drops.append(f"podEntries: the CPUs of {_pods(len(pods))} (no pod-level CPUs in v2)")
        pods = {}
    out = dataclasses.replace(
        state,
        version=int(fmt[1:]),
        type_name=LEGACY_TYPE_NAME,
        legacy_copy="v2",
        pod_entries=pods,
        checksum=0,
        verified=True,
    )
    return out, drops


def memory_state_as(state: MemoryManagerState, fmt: str) -> tuple[MemoryManagerState, list[str]]:
    """The memory state for ``fmt``; v1 loses the pods' own memory (``podEntries``)."""
    check_format("memory", fmt)
    drops: list[str] = []
    pods = state.pod_entries
    if fmt == "v1" and pods:
        drops.append(f"podEntries: the memory of {_pods(len(pods))} (no pod-level memory in v1)")
        pods = {}
    return dataclasses.replace(
        state, version=int(fmt[1:]), pod_entries=pods, checksum=0, verified=True
    ), drops


def dra_state_as(state: DRAState, fmt: str) -> tuple[DRAState, list[str]]:
    """The DRA state for ``fmt`` (the data format with its ``Entries`` list, or 1.31's v1).
    Both lose claims in the classic v1 layout (driver, class, resource handles: no devices
    per driver); v1 also loses devices' ``ShareID``."""
    check_format("dra", fmt)
    drops: list[str] = []
    claims = state.claims
    if claims is not None:
        classic = [c for c in claims if _is_classic(c)]
        if classic:
            drops.append(
                f"claims in the classic DRA v1 layout (driver, class, resource handles): "
                f"{len(classic)}"
            )
            claims = [c for c in claims if c not in classic]
    share_ids = state.share_ids
    if fmt == "v1":
        claims, shared = _without_share_ids(claims)
        if shared:
            drops.append(f"ShareID of {shared} device{'' if shared == 1 else 's'}")
        share_ids = False
    out = dataclasses.replace(
        state,
        claims=claims,
        version=fmt,
        entries_key="Entries",
        share_ids=share_ids,
        kind=KIND,
        api_version=API_VERSION,
        checksum=0,
    )
    return out, drops


def _is_classic(c: DRAClaim) -> bool:
    # What the writers refuse: fields only the 1.27–1.30 layouts have.
    return bool(
        c.driver_name or c.class_name or c.resource_handles is not None or c.cdi_devices is not None
    )


def _without_share_ids(claims: list[DRAClaim] | None) -> tuple[list[DRAClaim] | None, int]:
    if claims is None:
        return None, 0
    shared = 0
    out = []
    for c in claims:
        if not c.driver_state:
            out.append(c)
            continue
        drivers: dict[str, Any] = {}
        for driver, devices in c.driver_state.items():
            if devices is None:
                drivers[driver] = None
                continue
            kept = []
            for d in devices:
                if d.share_id is not None:
                    shared += 1
                    d = dataclasses.replace(d, share_id=None)
                kept.append(d)
            drivers[driver] = kept
        out.append(dataclasses.replace(c, driver_state=drivers))
    return out, shared


def node_state_as(kind: str, state: Any, fmt: str) -> tuple[Any, list[str]]:
    """:func:`cpu_state_as`, :func:`memory_state_as` or :func:`dra_state_as` by ``kind``."""
    if kind == "cpu" and isinstance(state, CPUManagerState):
        return cpu_state_as(state, fmt)
    if kind == "memory" and isinstance(state, MemoryManagerState):
        return memory_state_as(state, fmt)
    if kind == "dra" and isinstance(state, DRAState):
        return dra_state_as(state, fmt)
    raise InvalidInputError(f"state: expected the {kind} manager's state, got {state!r:.80}")


def device_entries_as(
    entries: Sequence[PodDevicesEntry], fmt: str
) -> tuple[list[PodDevicesEntry], list[str]]:
    """Device entries for ``fmt``: v1 (kubelet 1.18–1.19) lists each entry's device IDs
    without NUMA nodes (``{0: ids}`` for the writer: NUMA ids in Go's map order, each ID
    once). Lost: the NUMA node of devices not on node 0, as later kubelets read v1 devices as
    NUMA 0."""
    check_format("devices", fmt)
    if fmt == "v2":
        return list(entries), []
    out: list[PodDevicesEntry] = []
    moved = 0
    for e in entries:
        devs = e.device_ids
        if devs is None:
            out.append(e)
            continue
        if any(numa != 0 and ids for numa, ids in devs.items()):
            moved += 1
        flat: dict[str, None] = {}
        for numa in sorted(devs, key=str):
            flat.update(dict.fromkeys(devs[numa] or ()))
        out.append(dataclasses.replace(e, device_ids={0: list(flat)}))
    drops = []
    if moved:
        drops.append(
            f"NUMA nodes of the devices of {moved} "
            f"entr{'y' if moved == 1 else 'ies'} (v1 lists device IDs only)"
        )
    return out, drops
