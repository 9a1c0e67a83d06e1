"""Kubelet's checkpoint files, read and written exactly as kubelet does, independent of any
store, and the node facts beside them (NUMA topology, pod names): docs/node-files.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any

from podstore.errors import CheckpointNotFoundError, InvalidInputError

if TYPE_CHECKING:
    from podstore.checkpoint import values
    from podstore.checkpoint.cpu_state import CPUManagerState, dumps_cpu_state, read_cpu_state
    from podstore.checkpoint.cpuset import CPUSetError, format_cpuset, parse_cpuset
    from podstore.checkpoint.decode import Checkpoint
    from podstore.checkpoint.dra_state import dumps_dra_state, read_dra_state
    from podstore.checkpoint.dra_types import DRAClaim, DRADevice, DRAResourceHandle, DRAState
    from podstore.checkpoint.encode import dumps_checkpoint
    from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_checkpoint, write_checkpoint_file
    from podstore.checkpoint.kinds import (
        FILE_NAMES,
        KINDS,
        NodeCheckpoint,
        detect_kind,
        read_node_checkpoint,
    )
    from podstore.checkpoint.memory_state import (
        MemoryBlock,
        MemoryManagerState,
        MemoryTable,
        NUMANodeState,
        dumps_memory_state,
        read_memory_state,
    )
    from podstore.checkpoint.podnames import PodName, PodNames, read_pod_names
    from podstore.checkpoint.topology import NumaTopology, read_numa_topology
    from podstore.types import PodDevicesEntry

#: Where each re-exported name lives. They are imported on first access (PEP 562), as in
#: ``podstore/__init__.py``: a reader of the node's topology need not load the checkpoint
#: decoders, encoders and checksums (docs/performance.md, "Start-up and open").
_LAZY: dict[str, tuple[str, ...]] = {
    "podstore.checkpoint.cpu_state": ("CPUManagerState", "dumps_cpu_state", "read_cpu_state"),
    "podstore.checkpoint.cpuset": ("CPUSetError", "format_cpuset", "parse_cpuset"),
    "podstore.checkpoint.decode": ("Checkpoint",),
    "podstore.checkpoint.dra_state": ("dumps_dra_state", "read_dra_state"),
    "podstore.checkpoint.dra_types": ("DRAClaim", "DRADevice", "DRAResourceHandle", "DRAState"),
    "podstore.checkpoint.encode": ("dumps_checkpoint",),
    "podstore.checkpoint.files": ("DEFAULT_MAX_BYTES", "read_checkpoint", "write_checkpoint_file"),
    "podstore.checkpoint.kinds": (
        "FILE_NAMES",
        "KINDS",
        "NodeCheckpoint",
        "detect_kind",
        "read_node_checkpoint",
    ),
    "podstore.checkpoint.memory_state": (
        "MemoryBlock",
        "MemoryManagerState",
        "MemoryTable",
        "NUMANodeState",
        "dumps_memory_state",
        "read_memory_state",
    ),
    "podstore.checkpoint.podnames": ("PodName", "PodNames", "read_pod_names"),
    "podstore.checkpoint.topology": ("NumaTopology", "read_numa_topology"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'podstore.checkpoint' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


__all__ = [
    "DEFAULT_MAX_BYTES",
    "FILE_NAMES",
    "KINDS",
    "CPUManagerState",
    "CPUSetError",
    "Checkpoint",
    "CheckpointNotFoundError",
    "DRAClaim",
    "DRADevice",
    "DRAResourceHandle",
    "DRAState",
    "MemoryBlock",
    "MemoryManagerState",
    "MemoryTable",
    "NUMANodeState",
    "NodeCheckpoint",
    "NumaTopology",
    "PodName",
    "PodNames",
    "checksum",
    "detect_kind",
    "dumps_checkpoint",
    "dumps_cpu_state",
    "dumps_dra_state",
    "dumps_memory_state",
    "format_cpuset",
    "parse_cpuset",
    "read_checkpoint",
    "read_cpu_state",
    "read_dra_state",
    "read_memory_state",
    "read_node_checkpoint",
    "read_numa_topology",
    "read_pod_names",
    "render_spew",
    "write_checkpoint_file",
]


def _prepared(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    version: int,
) -> tuple[values.Entries, values.Registered]:
    from podstore.checkpoint import values

    if version not in (1, 2):
        raise InvalidInputError(f"version must be 1 or 2, not {version!r}")
    checked = values.sanitize(*values.normalize(entries, registered_devices))
    if version == 1:
        for i, e in enumerate(checked[0] or ()):
            if e.device_ids is not None and list(e.device_ids) != [0]:
                raise InvalidInputError(
                    f"entries[{i}].device_ids: a v1 entry has all its devices under NUMA 0 "
                    f"(device_ids={{0: [...]}} or None), not NUMA ids {sorted(e.device_ids)}"
                )
    return checked


def checksum(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    *,
    version: int = 2,
) -> int:
    """Kubelet's checksum of these values (``None`` is JSON ``null``; order matters; lone
    surrogates count as U+FFFD). ``version=1``: the legacy rule, each ``device_ids`` ``{0:
    ids}`` or ``None`` as :func:`read_checkpoint` gives v1 entries.

    Raises :class:`InvalidInputError` for values of the wrong type or shape.
    """
    from podstore.checkpoint import spew

    return spew.checksum_of(*_prepared(entries, registered_devices, version), version)


def render_spew(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    *,
    version: int = 2,
) -> str:
    """The exact text kubelet hashes for these values (go-spew ``%#v`` of ``Data.Data``);
    arguments and errors as :func:`checksum`."""
    from podstore.checkpoint import spew

    return spew.render(*_prepared(entries, registered_devices, version), version).decode("utf-8")
