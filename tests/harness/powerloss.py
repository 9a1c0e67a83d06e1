"""Power-loss simulation: which bytes would be on disk if the power failed at event k?

Method (docs/reliability.md, "Power loss"):

1. Record. A podstore workload runs on a real file with ``recorder.recording()``, which logs
   every statement podstore sends to SQLite, with its parameters, per connection, plus an
   "acknowledged" mark each time a public call returns.
2. Replay. The log is replayed statement for statement through apsw (its own SQLite build)
   on a Python VFS, ``RecordingVFS``, that passes everything to SQLite's ``unix`` VFS but logs
   each write, truncate, fsync, file creation and deletion of the database, its WAL and its
   journal (the ``-shm`` file is volatile by design and not modelled: SQLite rebuilds it).
3. Crash. ``DiskModel`` walks that I/O log. For a crash after event k it builds the files a
   disk could hold: for every file the bytes made durable by its last fsync, plus a random
   subset of the writes and truncates issued since, each write torn at 512-byte sector
   granularity; directory changes (creating or deleting the WAL or journal) persist in
   order up to a random point after the last directory fsync. Anything fsynced stays.
   The main file is created by podstore's ``_prepare_file``, which fsyncs it and its
   directory, so the model starts from a durable empty file (or, for an upgrade, from the
   filled store's bytes). With ``keep=1.0`` nothing is lost or torn: the image is the files
   as they were (tests/test_reliability_powerloss.py checks that against the real files).
4. Check. The images are opened with podstore (plain ``sqlite3``, the real unix VFS), which
   recovers the WAL; the harness then compares with the states the workload went through.

Assumptions, stated so they can be argued with: an fsync that returned means those bytes and
that size are durable (the disk does not lie); unsynced writes may persist in any subset and
torn at sector boundaries, but never change bytes outside what they wrote (SQLite's
powersafe-overwrite default); a directory fsync persists earlier directory changes in order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from harness.recorder import Event

SECTOR = 512

# SQLite's unix VFS syncs the directory on the first fsync of a journal or WAL it opened with
# SQLITE_OPEN_CREATE (UNIXFILE_DIRSYNC in os_unix.c).
_DIRSYNC_TYPES: int = (
    apsw.SQLITE_OPEN_WAL | apsw.SQLITE_OPEN_MAIN_JOURNAL | apsw.SQLITE_OPEN_SUPER_JOURNAL
)
_CREATE: int = apsw.SQLITE_OPEN_CREATE


@dataclass
class IOEvent:
    kind: str  # create | write | trunc | sync | unlink | ack
    name: str = ""
    offset: int = 0
    data: bytes = b""
    size: int = 0
    dirsync: bool = False
    ack: int = -1


class IOLog:
    def __init__(self) -> None:
        self.events: list[IOEvent] = []
        # files as they really were after the first k events (replay's ``snapshot_every``:
        # the test of the disk model itself)
        self.snapshots: dict[int, dict[str, bytes]] = {}


class _File(apsw.VFSFile):
    def __init__(self, vfs: RecordingVFS, name: Any, flags: list[int]) -> None:
        self._vfs = vfs
        self._name = os.path.basename(name.filename() if hasattr(name, "filename") else name)
        self._tracked = vfs.tracks(self._name)
        existed = os.path.exists(os.path.join(vfs.directory, self._name))
        super().__init__("unix", name, flags)
        self._dirsync = bool(flags[0] & _DIRSYNC_TYPES) and bool(flags[0] & _CREATE)
        if self._tracked and not existed:
            vfs.logged(IOEvent("create", self._name))

    def xWrite(self, data: bytes, offset: int) -> None:
        super().xWrite(data, offset)
        if self._tracked:
            self._vfs.logged(IOEvent("write", self._name, offset=offset, data=bytes(data)))

    def xTruncate(self, size: int) -> None:
        super().xTruncate(size)
        if self._tracked:
            self._vfs.logged(IOEvent("trunc", self._name, size=size))

    def xSync(self, flags: int) -> None:
        super().xSync(flags)
        if self._tracked:
            self._vfs.logged(IOEvent("sync", self._name, dirsync=self._dirsync))
            self._dirsync = False


class RecordingVFS(apsw.VFS):
    """SQLite's unix VFS, with the I/O on files in ``directory`` logged (each event after the
    real operation is done)."""

    def __init__(self, name: str, directory: Path, log: IOLog, snapshot_every: int = 0) -> None:
        self.directory = str(directory)
        self.log = log
        self.snapshot_every = snapshot_every
        super().__init__(name, "unix")

    def tracks(self, basename: str) -> bool:
        return not basename.endswith("-shm")

    def logged(self, event: IOEvent) -> None:
        self.log.events.append(event)
        if self.snapshot_every and len(self.log.events) % self.snapshot_every == 0:
            self.log.snapshots[len(self.log.events)] = self.files()

    def files(self) -> dict[str, bytes]:
        """The tracked files as they are now."""
        out = {}
        for name in sorted(os.listdir(self.directory)):
            if self.tracks(name):
                with open(os.path.join(self.directory, name), "rb") as fh:
                    out[name] = fh.read()
        return out

    def xOpen(self, name: Any, flags: list[int]) -> _File:
        return _File(self, name, flags)

    def xDelete(self, name: str, syncdir: bool) -> None:
        base = os.path.basename(name)
        existed = os.path.exists(name)
        super().xDelete(name, syncdir)
        if self.tracks(base) and existed:
            self.logged(IOEvent("unlink", base, dirsync=bool(syncdir)))


# ---- replaying podstore's statements ------------------------------------------------------------


def _bind(params: Any) -> Any:
    def one(v: Any) -> Any:
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, (bytearray, memoryview)):
            return bytes(v)
        return v

    if isinstance(params, dict):
        return {k: one(v) for k, v in params.items()}
    return tuple(one(v) for v in params)


@dataclass
class ReplayOptions:
    synchronous: int | None = None  # force PRAGMA synchronous on every connection (teeth run)
    wal_autocheckpoint: int | None = None  # checkpoint-heavy variant


def _override(sql: str, options: ReplayOptions) -> str:
    """The statement, or the replay's own value for a setting it forces (podstore sets both
    on every connection, after the replay's settings at open)."""
    head = sql.strip().upper()
    if options.synchronous is not None and head.startswith("PRAGMA SYNCHRONOUS ="):
        return f"PRAGMA synchronous = {int(options.synchronous)}"
    if options.wal_autocheckpoint is not None and head.startswith("PRAGMA WAL_AUTOCHECKPOINT ="):
        return f"PRAGMA wal_autocheckpoint = {int(options.wal_autocheckpoint)}"
    return sql


def replay(
    events: Sequence[Event],
    directory: Path,
    dbname: str,
    options: ReplayOptions,
    vfs_name: str,
    *,
    initial: bytes = b"",
    snapshot_every: int = 0,
) -> IOLog:
    """Run the recorded statements against ``directory/dbname`` through a RecordingVFS.

    The main file starts durable with ``initial`` (empty: what podstore's _prepare_file
    leaves for a new store; a filled store's bytes for an upgrade). With ``snapshot_every=K``
    the real files are kept after every K-th event and at the end (``IOLog.snapshots``).
    """
    log = IOLog()
    path = directory / dbname
    path.write_bytes(initial)
    path.chmod(0o600)
    vfs = RecordingVFS(vfs_name, directory, log, snapshot_every)
    conns: dict[int, apsw.Connection] = {}
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        for ev in events:
            if ev.kind == "ack":
                vfs.logged(IOEvent("ack", ack=ev.ack))
            elif ev.kind == "open":
                conn = apsw.Connection(str(directory / dbname), flags=flags, vfs=vfs_name)
                conns[ev.conn] = conn
                if options.synchronous is not None:
                    conn.execute(f"PRAGMA synchronous = {int(options.synchronous)}")
                else:
                    # The statements before podstore's own PRAGMA synchronous (Alembic's
                    # engine, the probe) run with the build's default: apsw's SQLite must have
                    # the system SQLite's (FULL) for the replay to mean the same thing.
                    row = conn.execute("PRAGMA synchronous").fetchone()
                    assert row is not None and row[0] == 2
                if options.wal_autocheckpoint is not None:
                    conn.execute(f"PRAGMA wal_autocheckpoint = {int(options.wal_autocheckpoint)}")
            elif ev.kind == "close":
                conns.pop(ev.conn).close()
            else:
                conn = conns[ev.conn]
                sql = _override(ev.sql, options)
                cur = conn.cursor()
                if ev.kind == "many":
                    rows = [_bind(p) for p in ev.params]
                    if rows:
                        for _ in cur.executemany(sql, rows):
                            pass
                else:
                    for _ in cur.execute(sql, _bind(ev.params)):
                        pass
        for conn in conns.values():
            conn.close()
        if snapshot_every:
            log.snapshots[len(log.events)] = vfs.files()
    finally:
        vfs.unregister()
    return log


# ---- what a disk may hold after the power fails --------------------------------------------------


@dataclass
class _Inc:
    """One incarnation of a file (a name may be deleted and created again)."""

    durable: bytearray = field(default_factory=bytearray)
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)


def _apply(buf: bytearray, op: tuple[str, int, bytes], rng: random.Random | None) -> None:
    kind, at, data = op
    if kind == "t":
        del buf[at:]
        return
    if len(buf) < at:
        buf.extend(bytes(at - len(buf)))
    if rng is None:
        buf[at : at + len(data)] = data
        return
    # torn write: each sector (aligned to the file) persists or not on its own
    pos = at
    while pos < at + len(data):
        end = min((pos // SECTOR + 1) * SECTOR, at + len(data))
        if rng.random() < 0.5:
            if len(buf) < pos:
                buf.extend(bytes(pos - len(buf)))
            buf[pos:end] = data[pos - at : end - at]
        pos = end


class DiskModel:
    """Durable and pending state of every file, advanced one I/O event at a time."""

    def __init__(self, dbname: str, initial: bytes = b"") -> None:
        main = _Inc(bytearray(initial))
        self.names: dict[str, _Inc | None] = {dbname: main}
        self.durable_names: dict[str, _Inc | None] = {dbname: main}
        self.meta_pending: list[tuple[str, _Inc | None]] = []
        self.acked = -1  # highest acknowledged workload index so far
        self.acks: list[int] = []

    def step(self, ev: IOEvent) -> None:
        if ev.kind == "ack":
            self.acks.append(ev.ack)
            self.acked = max(self.acked, ev.ack)
        elif ev.kind == "create":
            inc = _Inc()
            self.names[ev.name] = inc
            self.meta_pending.append((ev.name, inc))
        elif ev.kind == "unlink":
            self.names[ev.name] = None
            self.meta_pending.append((ev.name, None))
            if ev.dirsync:
                self._flush_meta()
        else:
            found = self.names.get(ev.name)
            assert found is not None, f"I/O on {ev.name} which does not exist"
            inc = found
            if ev.kind == "write":
                inc.pending.append(("w", ev.offset, ev.data))
            elif ev.kind == "trunc":
                inc.pending.append(("t", ev.size, b""))
            elif ev.kind == "sync":
                for op in inc.pending:
                    _apply(inc.durable, op, None)
                inc.pending.clear()
                if ev.dirsync:
                    self._flush_meta()

    def _flush_meta(self) -> None:
        for name, inc in self.meta_pending:
            self.durable_names[name] = inc
        self.meta_pending.clear()

    def crash_images(self, rng: random.Random, keep: float) -> dict[str, bytes]:
        """File name → bytes after a power loss now. ``keep``: chance an unsynced write (or
        truncate, or directory change) reached the disk; a write that did is torn at sector
        boundaries — except with ``keep=1.0``, which keeps everything whole: the files as
        they were when the power failed."""
        tear = rng if keep < 1.0 else None
        names = dict(self.durable_names)
        cut = 0
        while cut < len(self.meta_pending) and rng.random() < keep:
            cut += 1
        for name, inc in self.meta_pending[:cut]:
            names[name] = inc
        out: dict[str, bytes] = {}
        for name, inc in names.items():
            if inc is None:
                continue
            buf = bytearray(inc.durable)
            for op in inc.pending:
                if rng.random() < keep:
                    _apply(buf, op, tear if op[0] == "w" else None)
            out[name] = bytes(buf)
        return out


def walk(
    log: IOLog, dbname: str, crash_points: Sequence[int], initial: bytes = b""
) -> Iterator[tuple[int, DiskModel]]:
    """Advance a DiskModel through the log, yielding it at each crash point (event counts:
    the model then holds the first k events)."""
    model = DiskModel(dbname, initial)
    points = sorted(crash_points)
    i = 0
    for k, ev in enumerate(log.events):
        while i < len(points) and points[i] == k:
            yield k, model
            i += 1
        model.step(ev)
    while i < len(points):
        yield len(log.events), model
        i += 1


def write_images(images: dict[str, bytes], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, data in images.items():
        (directory / name).write_bytes(data)
        os.chmod(directory / name, 0o600)
