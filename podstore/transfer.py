"""Moving state between a PodStore and kubelet checkpoint files (import and export).

Import is split so the slow part (reading, verifying, decoding a file that may hold 100,000
entries) happens before the write lock is taken; the locked part is a few executemany calls.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from podstore import codec, history, writes
from podstore import queries as q
from podstore.checkpoint import (
    DEFAULT_MAX_BYTES,
    Checkpoint,
    dumps_checkpoint,
    read_checkpoint,
    write_checkpoint_file,
)
from podstore.errors import CheckpointFormatError, InvalidInputError
from podstore.types import ImportReport, PodDevicesEntry, SkippedEntry

#: progress(done, total) is called while entries are prepared; total is the entry count.
Progress = Callable[[int, int], None]


@dataclass(slots=True)
class PreparedImport:
    """A verified checkpoint turned into rows, ready to write."""

    path: str
    checkpoint: Checkpoint
    rows: list[writes.Row] = field(default_factory=list)
    skipped: list[SkippedEntry] = field(default_factory=list)


def _path(path: str | os.PathLike[str], argument: str) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"{argument}: expected a file path, got {path!r}")
    return path


def prepare_import(
    path: str | os.PathLike[str],
    *,
    strict: bool = False,
    max_bytes: int | None = None,
    progress: Progress | None = None,
) -> PreparedImport:
    """Read and verify ``path`` and decode every entry's AllocResp; nothing is written.

    Raises CheckpointFormatError / CheckpointCorruptError for a file kubelet would refuse,
    and CheckpointFormatError for a skipped entry when ``strict``.
    """
    name = _path(path, "path")
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInputError(f"max_bytes: expected a positive int, got {max_bytes!r}")
    cp = read_checkpoint(name, max_bytes=limit)
    prepared = PreparedImport(name, cp)
    total = len(cp.entries)
    for i, entry in enumerate(cp.entries):
        raw = b"" if entry.alloc_resp is None else entry.alloc_resp
        reason = codec.decode_error(raw)
        if reason is not None:
            prepared.skipped.append(
                SkippedEntry(
                    i,
                    entry.pod_uid,
                    entry.container_name,
                    entry.resource_name,
                    f"AllocResp is not a ContainerAllocateResponse: {reason}",
                )
            )
        else:
            prepared.rows.append(
                writes.Row(
                    entry.pod_uid,
                    entry.container_name,
                    entry.resource_name,
                    entry.device_ids,
                    raw,
                    entry.alloc_resp is None,
                )
            )
        if progress is not None and (i % 1000 == 999 or i + 1 == total):
            progress(i + 1, total)
    if strict and prepared.skipped:
        first = prepared.skipped[0]
        raise CheckpointFormatError(
            f"{name}: PodDeviceEntries[{first.index}] ({first.pod_uid}/{first.container_name}/"
            f"{first.resource_name}): {first.reason}; strict import refuses the file "
            f"({len(prepared.skipped)} such entries)"
        )
    return prepared


def load(conn: sqlite3.Connection, prepared: PreparedImport, *, merge: bool) -> ImportReport:
    """Write a prepared import inside the caller's transaction."""
    cp = prepared.checkpoint
    if merge:
        writes.replace_registered(conn, cp.registered_devices, whole=False)
    else:
        # Entries the file does not hold get a 'delete' history event; the rest are rewritten
        # below, each with an 'import' event.
        writes.delete_all(
            conn, keep={(r.pod_uid, r.container_name, r.resource_name) for r in prepared.rows}
        )
        # Kubelet writes null for no entries; keep [] only where the file itself had an empty
        # list, so that importing and exporting that file gives it back unchanged.
        explicit_empty = not cp.entries_null and not cp.entries
        conn.execute(q.SET_META, ("entries_json", "[]" if explicit_empty else "null"))
        writes.replace_registered(conn, cp.registered_devices, whole=True)
    imported = writes.write_many(conn, prepared.rows)
    return ImportReport(
        path=prepared.path,
        version=cp.version,
        checksum=cp.checksum,
        boot_id=cp.boot_id,
        entries=len(cp.entries),
        imported=imported,
        pods=len({r.pod_uid for r in prepared.rows}),
        registered_resources=len(cp.registered_devices or {}),
        merged=merge,
        skipped=tuple(prepared.skipped),
    )


def counted(
    entries: Iterable[PodDevicesEntry], total: int, progress: Progress
) -> Iterator[PodDevicesEntry]:
    """Pass entries through, calling progress(done, total) every 1,000 and at the end."""
    done = 0
    for entry in entries:
        yield entry
        done += 1
        if done % 1000 == 0:
            progress(done, total)
    progress(done, max(done, total))


def export_bytes(
    conn: sqlite3.Connection, entries: Iterable[PodDevicesEntry], boot_id: str | None
) -> tuple[bytes, int]:
    """The checkpoint file for the store's state (read in the caller's snapshot)."""
    listed = list(entries)
    row = conn.execute(q.GET_META, ("entries_json",)).fetchone()
    empty_form: list[PodDevicesEntry] | None = [] if row is not None and row[0] == "[]" else None
    registered = history.current_registered(conn)
    null_row = conn.execute(q.GET_META, ("registered_json_null",)).fetchone()
    registered_out = None if not registered and null_row and null_row[0] == "1" else registered
    data = dumps_checkpoint(listed or empty_form, registered_out, boot_id or None)
    return data, len(listed)


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (mode 0600, fsynced, directory fsynced)."""
    write_checkpoint_file(_path(path, "path"), data)
