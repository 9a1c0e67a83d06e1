"""From a checkpoint file to the rows the store writes: the one layer under import, sync and
``from_checkpoint_data``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podstore.errors import InvalidInputError
from podstore.pure import alloc_resp
from podstore.pure.alloc_resp import Response
from podstore.types import DevicesPerNUMA, PodDevicesEntry, SkippedEntry

if TYPE_CHECKING:
    from podstore.checkpoint import Checkpoint

#: Above this many rows a write goes through the bulk writer (``entries.write_many``): its
#: whole-store id reads cost more than they save for a handful of rows.
BULK_ROWS = 64

#: A device row: its owner's key columns, NUMA node, position, device id.
DeviceRow = tuple[int | str, ...]
#: An empty-list marker: owner, NUMA node, whether the list is null.
EmptyRow = tuple[int, int, bool]


@dataclass(slots=True)
class Row:
    """One entry ready to write: validated, with its response checked and decoded once."""

    pod_uid: str
    container_name: str
    resource_name: str
    devices: DevicesPerNUMA | None
    response: Response | None
    alloc_resp_json_null: bool = False

    @property
    def alloc_resp(self) -> bytes | None:
        return None if self.response is None else self.response.raw


def file_path(path: str | os.PathLike[str], argument: str) -> str:
    """``path`` as a string; InvalidInputError naming ``argument`` unless it is a file path."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"{argument}: expected a file path, got {path!r}")
    return path


def read_verified(
    path: str | os.PathLike[str], max_bytes: int | None = None
) -> tuple[str, Checkpoint]:
    """The path as a string and the file read and verified as import reads it (v2, then v1;
    checksum; at most ``max_bytes``, default 256 MiB); nothing decoded beyond the file.

    Raises InvalidInputError for bad arguments and what ``read_checkpoint`` raises.
    """
    # Here, not at the top: a process that only reads the store never decodes a file.
    from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_checkpoint

    name = file_path(path, "path")
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInputError(f"max_bytes: expected a positive int, got {max_bytes!r}")
    return name, read_checkpoint(name, max_bytes=limit)


def to_row(entry: PodDevicesEntry) -> Row | str:
    """The row a checkpoint entry restores as, or why kubelet skips it (an AllocResp that does
    not decode). A null AllocResp restores as an empty response, flagged so that export writes
    null again."""
    raw = b"" if entry.alloc_resp is None else entry.alloc_resp
    parsed = alloc_resp.parse(raw)
    if isinstance(parsed, str):
        return parsed
    return Row(
        entry.pod_uid,
        entry.container_name,
        entry.resource_name,
        entry.device_ids,
        parsed,
        entry.alloc_resp is None,
    )


def skipped_entry(index: int, entry: PodDevicesEntry, reason: str) -> SkippedEntry:
    """The report of a file entry kubelet would skip (``reason``: why it does not decode)."""
    return SkippedEntry(
        index,
        entry.pod_uid,
        entry.container_name,
        entry.resource_name,
        f"AllocResp is not a ContainerAllocateResponse: {reason}",
    )


def device_rows(
    devices: DevicesPerNUMA | None, *owner: int
) -> tuple[list[DeviceRow], list[EmptyRow]]:
    """``devices`` as ``(*owner, NUMA node, position, device id)`` rows, and ``(owner[0], NUMA
    node, is null)`` markers for the nodes whose list is ``[]`` or ``null`` (the store keeps
    them apart, and a node with no devices would otherwise leave no trace)."""
    rows: list[DeviceRow] = []
    empty: list[EmptyRow] = []
    if devices:
        for node, ids in devices.items():
            if ids:
                rows += [(*owner, node, pos, dev) for pos, dev in enumerate(ids)]
            else:
                empty.append((owner[0], node, ids is None))
    return rows, empty
