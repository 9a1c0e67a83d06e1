"""Keeping node_exporter's textfile (``watch --textfile``) current: rewritten after every sync
(its counters changed), and at a polling tick only when another writer changed the store's
files, so an idle node reads nothing."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from podstore.errors import PodStoreError
from podstore.watch.failures import ProblemLog

log = logging.getLogger("podstore")

#: (inode, size, mtime ns) of the database file and of its WAL, each None when missing.
FilesSignature = tuple[tuple[int, int, int] | None, ...]


def store_files(db: str) -> FilesSignature:
    out: list[tuple[int, int, int] | None] = []
    for name in (db, db + "-wal"):
        try:
            st = os.stat(name)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class TextfileWriter:
    """Writes ``registry``'s exposition to ``path`` for the store at ``db``; a failure is
    logged once per distinct problem, never raised (the next write tries again)."""

    def __init__(self, path: str | os.PathLike[str], registry: Any, db: str) -> None:
        self.path = path
        self.registry = registry
        self.db = db
        self._seen: FilesSignature | None = None
        self._problems = ProblemLog(log)
        # ``watch --kubelet-dir`` syncs from a thread per file: one write at a time, so the
        # file last written holds the counters last read.
        self._lock = threading.Lock()

    def write(self, *, always: bool) -> None:
        from podstore.metrics.exposition import write_textfile

        with self._lock:
            now = store_files(self.db)
            if not always and self._seen == now:
                return
            try:
                write_textfile(self.path, self.registry)
            except PodStoreError as exc:
                self._problems.report(str(exc), "%s", exc)
            else:
                self._problems.clear()
                self._seen = now
