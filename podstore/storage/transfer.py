"""Moving state between a PodStore and kubelet checkpoint files (import and export).

Import reads, verifies and decodes before the write lock; the locked part is a few
executemany calls.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from podstore.checkpoint import Checkpoint, dumps_checkpoint, write_checkpoint_file
from podstore.checkpoint.downgrade import device_entries_as
from podstore.errors import CheckpointFormatError, ImportRefusedError
from podstore.storage import entries
from podstore.storage.rows import Row, file_path, read_verified, skipped_entry, to_row
from podstore.storage.sql import entries as sql
from podstore.types import ImportReport, PodDevicesEntry, SkippedEntry

#: progress(done, total) is called while entries are prepared; total is the entry count.
Progress = Callable[[int, int], None]


@dataclass(slots=True)
class PreparedImport:
    """A verified checkpoint turned into rows, ready to write."""

    path: str
    checkpoint: Checkpoint
    rows: list[Row] = field(default_factory=list)
    skipped: list[SkippedEntry] = field(default_factory=list)


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
    name, cp = read_verified(path, max_bytes)
    prepared = PreparedImport(name, cp)
    total = len(cp.entries)
    for i, entry in enumerate(cp.entries):
        row = to_row(entry)
        if isinstance(row, str):
            prepared.skipped.append(skipped_entry(i, entry, row))
        else:
            prepared.rows.append(row)
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


def refuse_if_emptying(conn: sqlite3.Connection, prepared: PreparedImport, *, merge: bool) -> None:
    """Raise ImportRefusedError when a replacing import would drop the store's entries because
    every entry of the file was skipped (run in the import's transaction, before ``load``)."""
    if merge or prepared.rows or not prepared.skipped:
        return
    existing = int(conn.execute(sql.ENTRY_COUNT).fetchone()[0])
    if existing:
        n = len(prepared.skipped)
        raise ImportRefusedError(
            f"{prepared.path}: all {n} of its entries were skipped (AllocResp does not decode), "
            f"so replacing the store's content with it would drop all {existing} entries the "
            "store holds and put none in their place; refused, nothing was changed",
            skipped=n,
            existing=existing,
        )


def load(conn: sqlite3.Connection, prepared: PreparedImport, *, merge: bool) -> ImportReport:
    """Write a prepared import inside the caller's transaction."""
    cp = prepared.checkpoint
    if merge:
        entries.replace_registered(conn, cp.registered_devices, whole=False)
    else:
        # Entries the file does not hold get a 'delete' history event; the rest are rewritten
        # below, each with an 'import' event.
        entries.delete_all(
            conn, keep={(r.pod_uid, r.container_name, r.resource_name) for r in prepared.rows}
        )
        # Kubelet writes null for no entries; keep [] only where the file itself had an empty
        # list, so that importing and exporting that file gives it back unchanged.
        explicit_empty = not cp.entries_null and not cp.entries
        entries.set_meta(conn, "entries_json", "[]" if explicit_empty else "null")
        entries.replace_registered(conn, cp.registered_devices, whole=True)
    entries.keep_boot_id(conn, cp.boot_id, merge=merge)
    imported = entries.write_many(conn, prepared.rows)
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


#: Why ``export_bytes`` leaves an entry out.
NO_RESPONSE = "no allocation response: kubelet writes only entries with one"


def export_bytes(
    conn: sqlite3.Connection,
    boot_id: str | None,
    progress: Progress | None,
    fmt: str | None = None,
) -> tuple[bytes, int, list[SkippedEntry], list[str]]:
    """The checkpoint file for the store's state, read in the caller's snapshot, the number of
    entries it lists, the entries left out of it (no allocation response) and, for ``fmt``
    (a format a release writes: ``v1``, ``v2``), what that format could not hold. ``boot_id``
    None writes the ``BootID`` the store kept (none if it kept none, and none for ``fmt``: no
    release writes one); ``""`` writes none."""
    left_out: list[SkippedEntry] = []

    def listed_only(stored: Iterable[entries.StoredEntry]) -> Iterator[PodDevicesEntry]:
        for i, e in enumerate(stored):
            if e.alloc_resp is None:
                left_out.append(SkippedEntry(i, *e.key, NO_RESPONSE))
            else:
                yield e.checkpoint_entry(file_form=True)

    listed: Iterable[PodDevicesEntry] = listed_only(entries.read_entries(conn))
    if progress is not None:
        total = int(conn.execute(sql.COUNTS).fetchone()[2])
        listed = counted(listed, total, progress)
    listed = list(listed)
    drops: list[str] = []
    if fmt is not None:
        listed, drops = device_entries_as(listed, fmt)
    empty_form: list[PodDevicesEntry] | None = (
        [] if entries.meta(conn, "entries_json") == "[]" else None
    )
    registered = entries.current_registered(conn)
    null_registered = entries.meta(conn, "registered_json_null") == "1"
    registered_out = None if not registered and null_registered else registered
    if boot_id is None and fmt is None:
        boot_id = entries.meta(conn, entries.BOOT_ID)
    version = 1 if fmt == "v1" else 2
    data = dumps_checkpoint(listed or empty_form, registered_out, boot_id or None, version=version)
    return data, len(listed), left_out, drops


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (mode 0600, fsynced, directory fsynced)."""
    write_checkpoint_file(file_path(path, "path"), data)
