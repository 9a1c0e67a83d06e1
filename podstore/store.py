"""PodStore: the kubelet device manager's podDevices, kept in SQLite.

Thin by design: each public method checks its arguments, opens the right kind of
transaction and runs statements from ``queries.py``; Python only shapes rows.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from typing import Any, Literal

from podstore import codec, history, readonly, responses, validate, views, writes
from podstore import queries as q
from podstore.deviceplugin import Device, NUMANode, TopologyInfo
from podstore.engine import (
    DEFAULT_BUSY_TIMEOUT,
    ConnectOptions,
    Durability,
    begin_immediate,
    connect,
    database_path,
    ensure_schema,
    quick_check,
    translated_errors,
)
from podstore.errors import InvalidInputError, PodStoreError, ReadOnlyStoreError
from podstore.history import TimeArg
from podstore.types import (
    AllocationEvent,
    DeviceRunContainerOptions,
    DevicesPerNUMA,
    ImportReport,
    PodDevicesEntry,
    QueryResult,
    ResourceDeviceInstances,
    StoreStats,
)

log = logging.getLogger("podstore")


class _ThreadState(threading.local):
    """Each thread gets its own SQLite connection (sqlite3 objects must not be shared)."""

    conn: sqlite3.Connection | None = None
    pid: int = 0
    depth: int = 0


class PodStore:
    """A crash-safe store of which devices are allocated to which pod, container and resource.

    Open with :meth:`open`. One instance may be shared between threads (each thread uses its own
    connection); several processes may open the same file. Every mutating call is one atomic,
    durable transaction, or part of the enclosing :meth:`transaction` block.
    """

    def __init__(self, options: ConnectOptions) -> None:
        self._options = options
        self._local = _ThreadState()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._verifier: threading.Thread | None = None
        self._verifier_conn: sqlite3.Connection | None = None
        self._damage: PodStoreError | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        upgrade: bool = True,
        durability: Durability = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        verify: Literal["blocking", "background", "off"] = "blocking",
    ) -> PodStore:
        """Open (creating if needed, mode 0600) the store at ``path`` (a path or sqlite URL).

        The schema is brought to the newest revision first, under the write lock, unless
        ``upgrade=False`` (an old schema then raises SchemaError) or ``readonly=True`` (never
        writes, never migrates). ``durability="normal"`` trades the last commits on power loss
        for speed; the default "full" fsyncs every commit.

        ``verify``: ``PRAGMA quick_check`` reads every page (~2 ms per MB: a few ms for a
        node's worth of pods, ~300 ms for a synthetic store of 100,000 entries). "blocking"
        (default) runs it before returning, so a damaged file is refused at open.
        "background" runs it in a daemon thread on its own connection so the first answer
        does not wait: damage is logged when found and every later call raises
        StoreCorruptError; :meth:`wait_verified` blocks until the check is done. "off" skips
        it (``podstore verify`` can run it later).

        Raises InvalidInputError, SchemaError, StoreCorruptError or StoreBusyError.
        """
        if verify not in ("blocking", "background", "off"):
            raise InvalidInputError(
                f"verify: expected 'blocking', 'background' or 'off', got {verify!r}"
            )
        if durability not in ("full", "normal"):
            raise InvalidInputError(f"durability: expected 'full' or 'normal', got {durability!r}")
        # ConnectOptions checks busy_timeout (type, finite, range) for every caller.
        options = ConnectOptions(
            path=database_path(path),
            readonly=bool(readonly),
            durability=durability,
            busy_timeout=busy_timeout,
        )
        ensure_schema(options, upgrade=upgrade, check=verify == "blocking")
        store = cls(options)
        store._conn()  # fail now, not on first use
        if verify == "background":
            store._verifier = threading.Thread(
                target=store._background_check, name="podstore-quick-check", daemon=True
            )
            store._verifier.start()
        return store

    def _background_check(self) -> None:
        try:
            conn = connect(self._options)
        except (PodStoreError, sqlite3.Error):
            return  # the store's own connection opened; its calls will report the problem
        with self._lock:
            self._verifier_conn = conn
        try:
            quick_check(conn)
        except PodStoreError as exc:
            log.error("%s: %s", self._options.path, exc)
            self._damage = exc
        except sqlite3.Error:
            pass  # interrupted by close()
        finally:
            with self._lock:
                self._verifier_conn = None
            conn.close()

    def wait_verified(self, timeout: float | None = None) -> bool:
        """Wait for the open-time quick_check; True once it has passed, False on timeout.

        Raises StoreCorruptError if it found damage. Returns True at once when the store was
        opened with ``verify="blocking"`` or ``"off"``.
        """
        if self._verifier is not None:
            self._verifier.join(timeout)
            if self._verifier.is_alive():
                return False
        if self._damage is not None:
            raise self._damage
        return True

    @property
    def path(self) -> str:
        return self._options.path

    @property
    def readonly(self) -> bool:
        return self._options.readonly

    def close(self) -> None:
        """Close every connection this store opened. Further calls raise PodStoreError."""
        with self._lock:
            self._closed = True
            conns, self._connections = self._connections, []
            if self._verifier_conn is not None:
                self._verifier_conn.interrupt()  # a check cut short is not a finding
        if self._verifier is not None and self._verifier is not threading.current_thread():
            self._verifier.join()
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:  # pragma: no cover - close errors have nothing to undo
                log.debug("error closing a connection", exc_info=True)

    def __enter__(self) -> PodStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> sqlite3.Connection:
        state = self._local
        if self._closed:
            raise PodStoreError("the store is closed")
        if self._damage is not None:
            raise self._damage
        if state.conn is None or state.pid != os.getpid():
            # After fork() the inherited connection belongs to the parent: closing it here
            # could drop the parent's POSIX locks, so it is abandoned, not closed.
            conn = connect(self._options)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise PodStoreError("the store is closed")
                self._connections.append(conn)
            state.conn, state.pid, state.depth = conn, os.getpid(), 0
        return state.conn

    # ---- transactions ----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: BEGIN IMMEDIATE … COMMIT, or a SAVEPOINT inside a transaction()."""
        if self._options.readonly:
            raise ReadOnlyStoreError("the store was opened read-only")
        conn = self._conn()
        state = self._local
        with translated_errors():
            if state.depth:
                # A failing call inside a transaction() block must not leave half of itself
                # behind if the caller catches the error and carries on.
                name = f"podstore_{state.depth}"
                conn.execute(f"SAVEPOINT {name}")
                state.depth += 1
                try:
                    yield conn
                except BaseException:
                    conn.execute(f"ROLLBACK TO {name}")
                    conn.execute(f"RELEASE {name}")
                    raise
                else:
                    conn.execute(f"RELEASE {name}")
                finally:
                    state.depth -= 1
                return
            begin_immediate(conn, self._options.busy_timeout)
            state.depth = 1
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                state.depth = 0

    @contextmanager
    def transaction(self) -> Iterator[PodStore]:
        """Group calls into one atomic commit; an exception rolls all of them back.

        Calls made inside the block by the same thread see its uncommitted changes; other
        threads and processes see all of them or none. Blocks nest (as savepoints).
        """
        with self._write():
            yield self

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A consistent read over several statements (or the open write transaction)."""
        conn = self._conn()
        with translated_errors():
            if self._local.depth or conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def _rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        conn = self._conn()
        with translated_errors():
            return conn.execute(sql, params).fetchall()

    # ---- podDevices: writes ----------------------------------------------------------------

    def insert(
        self,
        pod_uid: str,
        container_name: str,
        resource_name: str,
        devices: Mapping[int, Sequence[str] | AbstractSet[str] | None] | None,
        alloc_resp: codec.AllocRespInput,
    ) -> None:
        """Record (or replace) the devices and plugin response of one container's resource.

        ``devices`` maps NUMA id (-1: no topology) to device IDs; ``alloc_resp`` is a
        ContainerAllocateResponse, its bytes, or None. A replacing insert keeps the entry's
        position. Raises InvalidInputError naming the bad argument; nothing is written then.
        """
        row = writes.Row(
            validate.text(pod_uid, "pod_uid"),
            validate.text(container_name, "container_name"),
            validate.text(resource_name, "resource_name"),
            validate.devices_per_numa(devices),
            codec.encode(alloc_resp),
        )
        with self._write() as conn:
            writes.write_one(conn, row)

    def delete(self, pod_uids: Iterable[str]) -> None:
        """Drop whole pods (all containers and resources). Unknown UIDs are ignored."""
        uids = validate.texts(pod_uids, "pod_uids")
        with self._write() as conn:
            writes.delete_pods(conn, uids)

    def from_checkpoint_data(self, entries: Iterable[PodDevicesEntry]) -> None:
        """Merge checkpoint entries into the store, in order, as kubelet's restore does.

        A later duplicate replaces an earlier entry; an entry whose ``alloc_resp`` does not
        decode is skipped with a warning (kubelet logs and skips it); a null ``alloc_resp``
        restores as an empty response. Existing entries not named are kept.
        """
        rows = [row for row, _ in self._restore_rows(entries, "entries") if row is not None]
        with self._write() as conn:
            if len(rows) > 64:
                writes.write_many(conn, rows)
            else:
                for row in rows:
                    writes.write_one(conn, row, "import")

    def _restore_rows(
        self, entries: Iterable[PodDevicesEntry], argument: str
    ) -> Iterator[tuple[writes.Row | None, str | None]]:
        """Validated rows for checkpoint entries; (None, reason) for ones kubelet skips."""
        if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
            raise InvalidInputError(f"{argument}: expected an iterable of PodDevicesEntry")
        for i, entry in enumerate(entries):
            where = f"{argument}[{i}]"
            if not isinstance(entry, PodDevicesEntry):
                raise InvalidInputError(
                    f"{where}: expected PodDevicesEntry, got {type(entry).__name__}"
                )
            resp = entry.alloc_resp
            if resp is not None and not isinstance(resp, (bytes, bytearray, memoryview)):
                raise InvalidInputError(
                    f"{where}.alloc_resp: expected bytes or None, got {type(resp).__name__}"
                )
            raw = b"" if resp is None else bytes(resp)
            reason = codec.decode_error(raw)
            row = writes.Row(
                validate.text(entry.pod_uid, f"{where}.pod_uid"),
                validate.text(entry.container_name, f"{where}.container_name"),
                validate.text(entry.resource_name, f"{where}.resource_name"),
                validate.devices_per_numa(entry.device_ids, f"{where}.device_ids"),
                raw,
                resp is None,
            )
            if reason is not None:
                log.error(
                    "skipping checkpoint entry %d (%s/%s/%s): AllocResp does not decode: %s",
                    i,
                    entry.pod_uid,
                    entry.container_name,
                    entry.resource_name,
                    reason,
                )
                yield None, reason
            else:
                yield row, None

    def set_registered_devices(
        self, mapping: Mapping[str, Sequence[str] | AbstractSet[str] | None] | None
    ) -> None:
        """Replace the whole RegisteredDevices mapping (resource → healthy device IDs).

        None records a JSON null (as a checkpoint may hold); a None list likewise.
        """
        registered = validate.registered(mapping, "mapping")
        with self._write() as conn:
            writes.replace_registered(conn, registered, whole=True)

    # ---- podDevices: reads -----------------------------------------------------------------

    def pods(self) -> set[str]:
        """Every pod UID in the store."""
        return {r[0] for r in self._rows(q.PODS)}

    def size(self) -> int:
        """The number of pods."""
        return int(self._rows(q.SIZE)[0][0])

    def __len__(self) -> int:
        return self.size()

    def has_pod(self, pod_uid: str) -> bool:
        return bool(self._rows(q.HAS_POD, (validate.text(pod_uid, "pod_uid"),)))

    def __contains__(self, pod_uid: object) -> bool:
        return isinstance(pod_uid, str) and self.has_pod(pod_uid)

    def container_devices(
        self, pod_uid: str, container_name: str, resource_name: str
    ) -> set[str] | None:
        """The devices of one entry; None when the pod, container or resource is unknown.

        An empty set (not None) for an entry without devices: kubelet reads non-nil as
        "already allocated".
        """
        rows = self._rows(
            q.CONTAINER_DEVICES,
            (
                validate.text(pod_uid, "pod_uid"),
                validate.text(container_name, "container_name"),
                validate.text(resource_name, "resource_name"),
            ),
        )
        if not rows:
            return None
        return {r[0] for r in rows if r[0] is not None}

    def pod_devices(self, pod_uid: str, resource_name: str) -> set[str]:
        """Union of the resource's devices over all containers of the pod (empty if unknown)."""
        rows = self._rows(
            q.POD_DEVICES,
            (validate.text(pod_uid, "pod_uid"), validate.text(resource_name, "resource_name")),
        )
        return {r[0] for r in rows}

    def add_container_allocated_resources(
        self, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        """``allocated[res] |= devices`` for every resource of the container (in place)."""
        self._apply_container_sets(q.ADD_CONTAINER_RESOURCES, pod_uid, container_name, allocated)

    def remove_container_allocated_resources(
        self, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        """``allocated[res] -= devices`` for every resource of the container (in place); a
        resource not yet in ``allocated`` gains an empty set, as upstream."""
        self._apply_container_sets(q.REMOVE_CONTAINER_RESOURCES, pod_uid, container_name, allocated)

    def _apply_container_sets(
        self, sql: str, pod_uid: str, container_name: str, allocated: dict[str, set[str]]
    ) -> None:
        acc = validate.device_sets(allocated, "allocated")
        params = {
            "pod": validate.text(pod_uid, "pod_uid"),
            "container": validate.text(container_name, "container_name"),
            "acc": json.dumps({_hex(r): sorted(map(_hex, d)) for r, d in acc.items()}),
        }
        result: dict[str, set[str]] = {}
        for resource, device_id in self._rows(sql, params):
            devs = result.setdefault(_unhex(resource), set())
            if device_id is not None:
                devs.add(_unhex(device_id))
        allocated.update(result)

    def devices(self) -> dict[str, set[str]]:
        """resource → every device allocated to it (kubelet's ``devices()``).

        A resource whose entries all lack a response still appears, with an empty set.
        """
        out: dict[str, set[str]] = {}
        for resource, device_id in self._rows(q.DEVICES):
            devs = out.setdefault(resource, set())
            if device_id is not None:
                devs.add(device_id)
        return out

    def get_container_devices(
        self, pod_uid: str, container_name: str
    ) -> ResourceDeviceInstances | None:
        """resource → device ID → Device with its NUMA topology; None for an unknown container.

        A device's nodes are the sorted union of the NUMA ids it is listed under, -1 aside;
        a device only under -1 has no topology. A resource with no NUMA keys is left out.
        """
        rows = self._rows(
            q.CONTAINER_TOPOLOGY,
            (validate.text(pod_uid, "pod_uid"), validate.text(container_name, "container_name")),
        )
        return shape_topology(rows)

    def get_pod_and_container_for_device(
        self, device_id: str, resource_name: str | None = None
    ) -> tuple[str, str] | None:
        """(pod UID, container) holding ``device_id`` — the earliest inserted match — or None.

        Without ``resource_name`` the look-up spans all resources, as upstream; give it when
        two plugins may export the same ID.
        """
        dev = validate.text(device_id, "device_id")
        if resource_name is None:
            rows = self._rows(q.OWNER_OF_DEVICE, (dev,))
        else:
            rows = self._rows(
                q.OWNER_OF_RESOURCE_DEVICE, (dev, validate.text(resource_name, "resource_name"))
            )
        return (rows[0][0], rows[0][1]) if rows else None

    def device_run_container_options(
        self,
        pod_uid: str,
        container_name: str,
        *,
        cdi_devices: bool = True,
        cdi_annotations: bool = False,
    ) -> DeviceRunContainerOptions | None:
        """Runtime settings merged from all plugin responses of a container; None if unknown.

        ``cdi_devices=False`` leaves CDI devices out (kubelet 1.28–1.31 with the gate off);
        ``cdi_annotations=True`` adds the ``cdi.k8s.io/…`` annotation of kubelet 1.28–1.31.
        """
        pod = validate.text(pod_uid, "pod_uid")
        container = validate.text(container_name, "container_name")
        # One query over the decoded response rows (views.RUN_OPTIONS_FOR_CONTAINER); it
        # gives what run_options.merge gives for the container's stored responses.
        rows = self._rows(views.RUN_OPTIONS_FOR_CONTAINER, {"pod": pod, "container": container})
        return responses.shape(
            pod,
            container,
            rows,
            cdi_devices=bool(cdi_devices),
            cdi_annotations=bool(cdi_annotations),
        )

    def to_checkpoint_data(self) -> list[PodDevicesEntry]:
        """Every entry that has a response, in position order, as a checkpoint would hold it."""
        with self._snapshot() as conn:
            return list(_checkpoint_entries(conn))

    def registered_devices(self) -> dict[str, list[str]]:
        """The checkpoint's RegisteredDevices: resource → device IDs in stored order."""
        conn = self._conn()
        with translated_errors():
            stored = history.current_registered(conn)
        return {resource: ids or [] for resource, ids in stored.items()}

    # ---- kubelet checkpoint files (the work is in transfer.py) -------------------------------

    def import_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        merge: bool = False,
        strict: bool = False,
        max_bytes: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportReport:
        """Load a ``kubelet_internal_checkpoint`` file, all or nothing, in one transaction.

        The checksum is verified first (CheckpointCorruptError / CheckpointFormatError, store
        unchanged). Without ``merge`` the file replaces every entry and the registered
        devices; with it the file's entries are inserted over the existing ones and its
        registered devices replace those of the same resources. Entries whose AllocResp does
        not decode are skipped and reported (kubelet skips them too); ``strict=True`` refuses
        the whole file instead. Files over ``max_bytes`` (default 256 MiB) are refused.
        ``progress(done, total)`` is called as entries are decoded (for a progress bar).
        """
        from podstore import transfer

        # Parse and verify before taking the write lock: a large file must not stall writers.
        prepared = transfer.prepare_import(
            path, strict=bool(strict), max_bytes=max_bytes, progress=progress
        )
        with self._write() as conn:
            return transfer.load(conn, prepared, merge=bool(merge))

    def export_checkpoint(
        self,
        path: str | os.PathLike[str],
        *,
        boot_id: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Write the store as a ``kubelet_internal_checkpoint`` kubelet accepts; returns the
        number of entries written.

        Atomic: a temp file in the same directory, fsync, rename, fsync of the directory;
        mode 0600. ``boot_id`` adds the (unmerged upstream) top-level BootID field.
        ``progress(done, total)`` is called as entries are read (for a progress bar).
        """
        from podstore import transfer

        if boot_id is not None:
            validate.text(boot_id, "boot_id")
        with self._snapshot() as conn:
            entries: Iterable[PodDevicesEntry] = _checkpoint_entries(conn)
            if progress is not None:
                total = int(conn.execute(q.COUNTS).fetchone()[2])
                entries = transfer.counted(entries, total, progress)
            data, count = transfer.export_bytes(conn, entries, boot_id)
        transfer.write_file(path, data)
        return count

    # ---- audits: history and read-only SQL (docs/sql.md) -------------------------------------

    def history(
        self,
        pod_uid: str | None = None,
        device_id: str | None = None,
        since: TimeArg | None = None,
        until: TimeArg | None = None,
    ) -> list[AllocationEvent]:
        """Events of the allocation history, oldest first, optionally only those of one pod,
        naming one device, or in the half-open time range [since, until).

        Times are datetimes (naive = UTC) or ISO 8601 strings; see history.py for the
        operations. Raises InvalidInputError for a bad argument.
        """
        params: dict[str, str] = {}
        if pod_uid is not None:
            params["pod_uid"] = validate.text(pod_uid, "pod_uid")
        if device_id is not None:
            params["device_id"] = validate.text(device_id, "device_id")
        if since is not None:
            params["since"] = history.parse_time(since, "since")
        if until is not None:
            params["until"] = history.parse_time(until, "until")
        return [history.to_event(r) for r in self._rows(history.history_sql(params), params)]

    def owners_at(self, device_id: str, when: TimeArg) -> list[tuple[str, str, str]]:
        """Who held ``device_id`` at the instant ``when``: (pod UID, container, resource) of
        every entry listing it then, sorted ("who had GPU X at 10:32").

        Answered from the history, so exact back to the oldest kept event (see
        prune_history). Raises InvalidInputError for a bad argument.
        """
        params = {
            "device_id": validate.text(device_id, "device_id"),
            "when": history.parse_time(when, "when"),
        }
        return [(r[0], r[1], r[2]) for r in self._rows(history.OWNERS_AT, params)]

    def prune_history(self, before: TimeArg) -> int:
        """Remove history events older than ``before``; returns how many were removed.

        Per entry (and per registered resource) the latest event before the cut is kept when
        the entry was still present then: it carries the state at the cut, so replaying the
        remaining log from empty still gives the current state, and ``owners_at`` stays exact
        for any instant from the cut on.
        """
        params = {"before": history.parse_time(before, "before")}
        with self._write() as conn:
            conn.execute(history.PRUNE, params)
            # Not cursor.rowcount: pysqlite reports -1 for a statement that starts with WITH.
            return int(conn.execute("SELECT changes()").fetchone()[0])

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> QueryResult:
        """Run one read-only SQL statement (the views of docs/sql.md, the tables) and return
        its columns and rows.

        Runs on a separate connection that can only read (mode=ro, query_only and an
        authorizer), so it sees committed data only, not an open transaction's changes. Any
        statement that would write — INSERT, UPDATE, DELETE, DDL, ATTACH, a PRAGMA with a
        value — raises ReadOnlyStoreError; bad SQL or parameters raise InvalidInputError.
        """
        if self._closed:
            raise PodStoreError("the store is closed")
        conn = readonly.open_guarded(self._options)
        try:
            return readonly.run(conn, sql, params)
        finally:
            conn.close()

    def stats(self) -> StoreStats:
        """Row counts: pods, containers, allocations, device rows, distinct devices."""
        return StoreStats(*self._rows(q.COUNTS)[0])


def _hex(value: str) -> str:
    """As SQLite's hex() renders a TEXT value (see queries._MINE)."""
    return value.encode("utf-8").hex().upper()


def _unhex(value: str) -> str:
    return bytes.fromhex(value).decode("utf-8")


def shape_topology(rows: Sequence[Any]) -> ResourceDeviceInstances | None:
    """ResourceDeviceInstances from CONTAINER_TOPOLOGY rows (no rows: unknown container)."""
    if not rows:
        return None
    out = ResourceDeviceInstances()
    for resource, device_id, nodes, has_keys in rows:
        if resource is None or not has_keys:
            continue
        instances = out.setdefault(resource, {})
        if device_id is None:
            continue
        device = Device()
        if nodes is not None:
            ids = sorted({int(n) for n in str(nodes).split(",")})
            device.topology.CopyFrom(TopologyInfo(nodes=[NUMANode(ID=n) for n in ids]))
        instances[device_id] = device
    return out


def _checkpoint_entries(conn: sqlite3.Connection) -> Iterator[PodDevicesEntry]:
    """Stream entries joined with their device lists (three ordered scans, merged)."""
    devices = conn.cursor().execute(q.CHECKPOINT_DEVICES)
    empties = conn.cursor().execute(q.CHECKPOINT_EMPTY_LISTS)
    next_device = devices.fetchone()
    next_empty = empties.fetchone()
    for aid, uid, name, resource, ids_null, resp, resp_null in conn.cursor().execute(
        q.CHECKPOINT_ENTRIES
    ):
        per_numa: DevicesPerNUMA = {}
        # Rows of entries without a response (not exported) are passed over on the way.
        while next_device is not None and next_device[0] <= aid:
            if next_device[0] == aid:
                lst = per_numa.setdefault(int(next_device[1]), [])
                assert lst is not None
                lst.append(next_device[2])
            next_device = devices.fetchone()
        while next_empty is not None and next_empty[0] <= aid:
            if next_empty[0] == aid:
                per_numa[int(next_empty[1])] = None if next_empty[2] else []
            next_empty = empties.fetchone()
        yield PodDevicesEntry(
            uid,
            name,
            resource,
            None if ids_null else dict(sorted(per_numa.items())),
            None if resp_null else bytes(resp),
        )
