"""AsyncPodStore's worker process for the whole-file calls (docs/api.md, "asyncio").

A worker thread keeps the GIL: decoding an 8 MB checkpoint and the collector sweeping an
import's objects stalled the loop 0.13-0.5 s. So those calls run in one fresh interpreter per
AsyncPodStore (never a fork of the loop's process), started on first use with the parent's
``sys.path`` and cwd, sent one pickled request at a time by a parent thread.

A call stays in a thread inside the task's transaction (aio.py), under ``SMALL_FILE``, with a
callable or unpicklable argument, or when not in ``ROUTED`` (``sync_checkpoint`` keeps
per-file state in the parent's store).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from podstore.checkpoint import FILE_NAMES
from podstore.errors import PodStoreError
from podstore.sqlite import forking
from podstore.sqlite.connection import Durability
from podstore.store import PodStore

#: The methods the worker process may run: each a whole file (or kubelet directory), in one
#: transaction. ``import_node``'s device-file cache is safe there: a TEMP-table token makes
#: another connection's copy reload (storage/sync.py, SyncState).
ROUTED: Mapping[object, str] = {
    PodStore.import_checkpoint: "import_checkpoint",
    PodStore.export_checkpoint: "export_checkpoint",
    PodStore.import_node_checkpoint: "import_node_checkpoint",
    PodStore.export_node_checkpoint: "export_node_checkpoint",
    PodStore.import_node: "import_node",
}
_NAMES = frozenset(ROUTED.values())


def routed_name(method: object) -> str | None:
    """The worker-process name of ``method`` (a PodStore function), or None."""
    try:
        return ROUTED.get(method)
    except TypeError:  # an unhashable callable given to astore.call
        return None


#: Below this size (file to read, or store to export) the process round trip costs more than
#: the few milliseconds of GIL a thread would hold.
SMALL_FILE = 256 * 1024
#: What a store's file holds before any entry: its schema (256 KiB, 64 pages, at revision
#: 0012; tests/test_embed_async_process.py checks an empty store stays under it). An export's
#: work is what the file holds beyond it.
SCHEMA_BYTES = 512 * 1024

# The parent's sys.path is set before podstore is imported, so the child runs the same code.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
    "from podstore.aio_process import serve; serve(int(sys.argv[1]))"
)


@dataclass(frozen=True)
class StoreSpec:
    """How the worker opens the store: as the parent did, without migrating or verifying."""

    path: str
    readonly: bool
    durability: Durability
    busy_timeout: float
    #: (st_dev, st_ino): the worker opens the path only while it names that file.
    file_id: tuple[int, int]


def _size(path: object) -> int:
    """The size of the file at ``path``; 0 if none (the thread then raises for it)."""
    if not isinstance(path, str | bytes | os.PathLike):
        return 0
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0


def _work_size(name: str, store_path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many bytes the call reads or writes, near enough to choose thread or process."""
    if name in ("import_checkpoint", "import_node_checkpoint"):
        return _size(args[0] if args else kwargs.get("path"))
    if name == "import_node":
        kubelet_dir = args[0] if args else kwargs.get("kubelet_dir")
        if kubelet_dir is None:
            from podstore.storage.node.import_dir import DEFAULT_KUBELET_DIR

            kubelet_dir = DEFAULT_KUBELET_DIR
        if not isinstance(kubelet_dir, str | os.PathLike):
            return 0
        return sum(_size(os.path.join(kubelet_dir, f)) for f in FILE_NAMES.values())
    # An export writes what the store holds: its file (and WAL) past the schema bounds it
    # well enough.
    return max(0, _size(store_path) + _size(store_path + "-wal") - SCHEMA_BYTES)


def process_request(
    name: str, store_path: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bytes | None:
    """The pickled request for the worker process, or None: run the call in a thread."""
    if name not in _NAMES:
        return None
    values = (*args, *kwargs.values())
    if any(callable(v) for v in values):
        return None  # a callback must be called in this process, by this program
    if _work_size(name, store_path, args, kwargs) < SMALL_FILE:
        return None
    try:
        return pickle.dumps((name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # not picklable (PicklingError, TypeError, AttributeError, ...)
        return None


class RemoteTraceback(Exception):
    """The ``__cause__`` of an error raised in the worker process: its traceback there."""


# Workers to forget in a forked child: the socket would be shared with the parent's calls.
_LIVE: weakref.WeakSet[ProcessWorker] = weakref.WeakSet()


class ProcessWorker:
    """The parent's handle on one worker process: calls take turns (one at a time)."""

    def __init__(self, store: PodStore) -> None:
        self._store = store
        options = store._sessions.options
        st = os.stat(options.path)
        self._spec = StoreSpec(
            options.path,
            options.readonly,
            options.durability,
            options.busy_timeout,
            (st.st_dev, st.st_ino),
        )
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._closed = False
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None: none started, or it was stopped)."""
        proc = self._proc
        return None if proc is None else proc.pid

    def call(self, name: str, request: bytes) -> Any:
        """Send ``request`` and return the answer or raise the worker's error (blocks)."""
        with self._lock:
            if self._closed:
                raise PodStoreError("the store is closed")
            if self._proc is not None and self._proc.poll() is not None:
                self._reap()  # died between calls: this call gets a new worker
            if self._conn is None:
                self._start()
            conn, proc = self._conn, self._proc
            assert conn is not None and proc is not None
            try:
                conn.send_bytes(request)
                answer = conn.recv_bytes()
            except (EOFError, OSError):
                code = self._reap()
                raise PodStoreError(
                    f"the asyncio store's worker process (pid {proc.pid}) ended during "
                    f"{name} ({_ending(code)}): the call's transaction committed whole or not "
                    "at all (check with the method's reads); the next call starts a new worker"
                ) from None
        try:
            ok, value, remote_tb = pickle.loads(answer)
        except Exception as exc:  # e.g. an error type whose constructor its pickle cannot call
            raise PodStoreError(
                f"the asyncio store's worker process answered {name} with what this process "
                f"cannot unpickle ({type(exc).__name__}: {exc})"
            ) from exc
        if ok:
            return value
        assert isinstance(value, BaseException)
        value.__cause__ = RemoteTraceback(remote_tb)
        raise value

    def close(self) -> None:
        """Stop the worker (after the call it runs, if any) and reap it. Blocks."""
        with self._lock:
            self._closed = True
            self._stop()

    # ---- the worker's life -----------------------------------------------------------------

    def _start(self) -> None:
        # The worker opens with verify="off": the parent's check must be over first.
        self._store.wait_verified()
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno()), json.dumps(sys.path)],
                pass_fds=(theirs.fileno(),),
                cwd=os.getcwd(),  # relative paths name the same files there
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # only the child holds its end: its exit is our EOF
        self._proc, self._conn = proc, Connection(ours.detach())
        try:
            self._conn.send(self._spec)
            ok, value, remote_tb = self._conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise PodStoreError(
                f"the asyncio store's worker process ended while starting ({_ending(code)})"
            ) from None
        if not ok:  # it could not open the store: its error, after it has exited
            self._stop()
            value.__cause__ = RemoteTraceback(remote_tb)
            raise value

    def _stop(self) -> None:
        """Close our end (the worker sees EOF, closes its store and exits), then reap it."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a wedged worker
                proc.kill()
                proc.wait()

    def _reap(self) -> int | None:
        """Forget a worker that died; returns its exit status (negative: killed by signal)."""
        proc = self._proc
        self._stop()  # it is gone already: the wait returns at once
        return None if proc is None else proc.returncode


def _forget_all_in_child() -> None:
    # A forked child starts its own worker; closing its copy of the socket leaves the parent's.
    for worker in list(_LIVE):
        worker._lock = threading.Lock()
        if worker._conn is not None:
            worker._conn.close()
        worker._conn, worker._proc = None, None


os.register_at_fork(after_in_child=_forget_all_in_child)


def _ending(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# ---- the worker process ------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The worker's main loop: open the store as told, then answer requests until EOF."""
    # Ctrl-C reaches the process group: the parent decides, and stops us by closing the socket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    spec: StoreSpec = conn.recv()
    # A path moved or replaced since would open (or create) another store.
    if forking.file_key(spec.path) != spec.file_id:
        _reply(
            conn,
            False,
            PodStoreError(
                f"{spec.path} no longer names this store's file (moved, deleted or replaced "
                "since it was opened); the worker process did not open it"
            ),
        )
        return
    try:
        store = PodStore.open(
            spec.path,
            readonly=spec.readonly,
            upgrade=False,
            durability=spec.durability,
            busy_timeout=spec.busy_timeout,
            verify="off",
        )
    except Exception as exc:
        _reply(conn, False, exc)
        return
    _reply(conn, True, None)
    try:
        while True:
            try:
                name, args, kwargs = pickle.loads(conn.recv_bytes())
            except EOFError:
                return
            if name not in _NAMES:  # only the routed methods, never an arbitrary attribute
                _reply(conn, False, PodStoreError(f"not a worker process call: {name!r}"))
                continue
            try:
                result = getattr(store, name)(*args, **kwargs)
            except Exception as exc:
                _reply(conn, False, exc)
            else:
                _reply(conn, True, result)
    finally:
        store.close()


def _reply(conn: Connection, ok: bool, value: Any) -> None:
    remote_tb = "".join(traceback.format_exception(value)) if not ok else ""
    try:
        conn.send((ok, value, remote_tb))
    except Exception as exc:  # the value did not pickle: send what it said
        what = value if not ok else exc
        conn.send((False, PodStoreError(f"{type(what).__name__}: {what}"), remote_tb))
