"""Checkpoint states for the sync and follower tests: random node states, kubelet-like rewrites
of them, files written with the project's Go-exact encoder, and a reference of the events a
sync from one state to the next must write.

A state is ``(entries, registered)`` as ``dumps_checkpoint`` takes them. The reference compares
entries as kubelet means them: device lists as multisets per NUMA node (null apart from
empty), responses decoded, order never; it is written independently of the SQL it checks.
"""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podstore import ContainerAllocateResponse, DeviceSpec, PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file
from podstore.deviceplugin import CDIDevice, Mount

Registered = dict[str, list[str] | None] | None
Key = tuple[str, str, str]

RESOURCES = ("example.com/gpu", "example.com/nic", "vendor.io/fpga")


def decode(data: bytes) -> ContainerAllocateResponse:
    """A stored AllocResp as its message (raises protobuf's DecodeError if it is not one)."""
    msg = ContainerAllocateResponse()
    msg.ParseFromString(data)
    return msg


@dataclass
class State:
    entries: list[PodDevicesEntry] | None
    registered: Registered

    def data(self, boot_id: str | None = None) -> bytes:
        return dumps_checkpoint(self.entries, self.registered, boot_id)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Replace the file by rename, as kubelet does (temp file, fsync, rename)."""
        write_checkpoint_file(path, self.data())

    def folded(self) -> dict[Key, PodDevicesEntry]:
        """Entries by key as kubelet restores them: the last duplicate wins; entries whose
        AllocResp does not decode are skipped."""
        out: dict[Key, PodDevicesEntry] = {}
        for e in self.entries or ():
            try:
                decode(e.alloc_resp or b"")
            except Exception:
                continue
            out[(e.pod_uid, e.container_name, e.resource_name)] = e
        return out


# ---- generating states ------------------------------------------------------------------------


def response_bytes(msg: ContainerAllocateResponse, rng: random.Random | None = None) -> bytes:
    """The message's bytes; with ``rng``, its map entries in a random order, as kubelet's
    marshalling writes them (concatenated protobuf messages merge into one)."""
    if rng is None:
        return msg.SerializeToString(deterministic=True)
    envs = list(msg.envs.items())
    annotations = list(msg.annotations.items())
    rng.shuffle(envs)
    rng.shuffle(annotations)
    rest = ContainerAllocateResponse()
    rest.CopyFrom(msg)
    rest.envs.clear()
    rest.annotations.clear()
    parts = [ContainerAllocateResponse(envs={k: v}).SerializeToString() for k, v in envs]
    parts.append(rest.SerializeToString())
    parts += [
        ContainerAllocateResponse(annotations={k: v}).SerializeToString() for k, v in annotations
    ]
    return b"".join(parts)


def random_response(rng: random.Random) -> ContainerAllocateResponse:
    msg = ContainerAllocateResponse()
    for i in range(rng.randint(0, 3)):
        msg.envs[f"ENV_{i}"] = rng.choice(["a", "b", "0,1", ""])
    for i in range(rng.choice([0, 0, 1, 2])):
        msg.devices.append(
            DeviceSpec(
                container_path=f"/dev/x{i}",
                host_path=f"/dev/x{i}",
                permissions=rng.choice(["rw", "r"]),
            )
        )
    if rng.random() < 0.2:
        msg.mounts.append(Mount(container_path="/m", host_path="/h", read_only=rng.random() < 0.5))
    if rng.random() < 0.2:
        msg.annotations["k"] = rng.choice(["v", "w"])
        msg.annotations["j"] = "x"
    if rng.random() < 0.1:
        msg.cdi_devices.append(CDIDevice(name="vendor.com/class=dev0"))
    return msg


def random_devices(rng: random.Random, pool: Sequence[str]) -> dict[int, list[str] | None] | None:
    roll = rng.random()
    if roll < 0.03:
        return None
    if roll < 0.06:
        return {}
    out: dict[int, list[str] | None] = {}
    for node in rng.sample([-1, 0, 1, 2], rng.randint(1, 2)):
        r = rng.random()
        if r < 0.05:
            out[node] = None
        elif r < 0.1:
            out[node] = []
        else:
            out[node] = rng.sample(list(pool), rng.randint(1, 3))
    return out


def random_entry(rng: random.Random, pod: str, container: str, resource: str) -> PodDevicesEntry:
    pool = [f"{resource.split('/')[0][:3]}-{i}" for i in range(12)]
    resp: bytes | None = response_bytes(random_response(rng), rng)
    if rng.random() < 0.03:
        resp = None  # a null AllocResp restores as an empty response
    return PodDevicesEntry(pod, container, resource, random_devices(rng, pool), resp)


def random_registered(rng: random.Random) -> Registered:
    if rng.random() < 0.05:
        return None
    out: dict[str, list[str] | None] = {}
    for resource in rng.sample(RESOURCES, rng.randint(0, len(RESOURCES))):
        out[resource] = None if rng.random() < 0.05 else [f"h{i}" for i in range(rng.randint(0, 4))]
    return out


def random_state(rng: random.Random, pods: int) -> State:
    entries = []
    for p in range(pods):
        for c in rng.sample(["main", "side", "init"], rng.randint(1, 2)):
            for r in rng.sample(RESOURCES, rng.randint(1, 2)):
                entries.append(random_entry(rng, f"pod-{p}", c, r))
    return State(entries, random_registered(rng))


def reordered(rng: random.Random, state: State) -> State:
    """The same state as kubelet may write it next time: entries, ID lists, registered lists
    and response map entries in another order."""
    entries = []
    for e in state.entries or ():
        devs = None
        if e.device_ids is not None:
            devs = {}
            for node, ids in e.device_ids.items():
                devs[node] = None if ids is None else rng.sample(ids, len(ids))
        resp = e.alloc_resp
        if resp is not None:
            resp = response_bytes(decode(resp), rng)
        entries.append(PodDevicesEntry(e.pod_uid, e.container_name, e.resource_name, devs, resp))
    rng.shuffle(entries)
    registered = None
    if state.registered is not None:
        registered = {
            r: None if ids is None else rng.sample(ids, len(ids))
            for r, ids in state.registered.items()
        }
    return State(entries if state.entries is not None else None, registered)


def mutate(rng: random.Random, state: State, changes: int = 3) -> State:
    """A kubelet-like next state: a few entries added, dropped or changed, maybe the registered
    devices, and everything in a new order."""
    entries = list(state.entries or [])
    for _ in range(changes):
        roll = rng.random()
        if roll < 0.35 or not entries:
            pod = f"pod-n{rng.getrandbits(24):x}"
            entries.append(random_entry(rng, pod, "main", rng.choice(RESOURCES)))
        elif roll < 0.6:
            entries.pop(rng.randrange(len(entries)))
        else:
            i = rng.randrange(len(entries))
            old = entries[i]
            new = random_entry(rng, old.pod_uid, old.container_name, old.resource_name)
            entries[i] = new
    registered = state.registered
    if rng.random() < 0.3:
        registered = random_registered(rng)
    return reordered(rng, State(entries, registered))


# ---- the reference -------------------------------------------------------------------------------


def canonical_devices(devs: Mapping[int, Sequence[str] | None] | None) -> Any:
    if devs is None:
        return None
    return tuple(
        sorted((n, None if ids is None else tuple(sorted(ids))) for n, ids in devs.items())
    )


def canonical_response(raw: bytes | None, json_null: bool) -> Any:
    if raw is None:
        return None
    msg = decode(raw)
    return (
        tuple(sorted(msg.envs.items())),
        tuple((m.container_path, m.host_path, m.read_only) for m in msg.mounts),
        tuple((d.container_path, d.host_path, d.permissions) for d in msg.devices),
        tuple(sorted(msg.annotations.items())),
        tuple(c.name for c in msg.cdi_devices),
        json_null,
    )


def canonical_entry(e: PodDevicesEntry) -> Any:
    raw = b"" if e.alloc_resp is None else e.alloc_resp
    return (canonical_devices(e.device_ids), canonical_response(raw, e.alloc_resp is None))


def canonical_registered(reg: Registered) -> dict[str, Any]:
    return {r: None if ids is None else tuple(sorted(ids)) for r, ids in (reg or {}).items()}


Event = tuple[str, str | None, str | None, str, Any]


def expected_events(old: State | None, new: State) -> list[Event]:
    """The events a sync from ``old`` (None: an empty store) to ``new`` writes, in order,
    device maps canonical: deletes (sorted by key; compare through :func:`normal`),
    registered changes (by resource), replaces and inserts (new order)."""
    before = old.folded() if old is not None else {}
    after = new.folded()
    out: list[Event] = []
    for key, e in sorted(before.items()):
        if key not in after:
            out.append(("delete", *key, canonical_devices(e.device_ids)))
    old_reg = canonical_registered(old.registered if old is not None else {})
    new_reg = canonical_registered(new.registered)
    for r in sorted(old_reg.keys() - new_reg.keys()):
        out.append(("unregistered", None, None, r, old_reg[r]))
    for r in sorted(new_reg):
        if r not in old_reg or old_reg[r] != new_reg[r]:
            out.append(("registered", None, None, r, new_reg[r]))
    for key, e in after.items():
        if key in before and canonical_entry(before[key]) != canonical_entry(e):
            out.append(("replace", *key, canonical_devices(e.device_ids)))
    for key, e in after.items():
        if key not in before:
            out.append(("insert", *key, canonical_devices(e.device_ids)))
    return out


def normal(events: Sequence[Event]) -> list[Event]:
    """Events with the deletes of one sync sorted by key: a sync writes them in the store's
    position order, which a file does not tell (everything else is in a fixed order)."""
    out = list(events)
    deletes = sorted(e for e in out if e[0] == "delete")
    rest = [e for e in out if e[0] != "delete"]
    return (
        deletes + rest
        if deletes and out[: len(deletes)] == [e for e in out if e[0] == "delete"]
        else out
    )


def canonical_event(ev: Any) -> Event:
    ids = ev.device_ids
    if isinstance(ids, list):
        ids_c: Any = tuple(sorted(ids))
    else:
        ids_c = canonical_devices(ids)
    return (ev.op, ev.pod_uid, ev.container_name, ev.resource_name, ids_c)


def store_state(store: PodStore) -> tuple[dict[Key, Any], dict[str, Any]]:
    """The store's entries and registered devices, canonical (order-free).

    The null flags come from ``query`` (a connection of its own) and the entries from the
    API: two snapshots. A follower may commit between them, so the state is read until two
    reads in a row agree (a sync changes the store once per file, never back and forth)."""
    previous = None
    for _ in range(200):
        current = _read_state(store)
        if current is not None and current == previous:
            return current
        previous = current
    # Never torn by a settled store: an entry flagged null that does not read as b"", or a
    # store that never stopped changing.
    raise AssertionError(f"the store's state never read the same twice: {previous!r}")


def _read_state(store: PodStore) -> tuple[dict[Key, Any], dict[str, Any]] | None:
    """One read, or None when it was torn by a commit between its snapshots."""
    # A restored null AllocResp reads as b"" through the API (kubelet's toCheckpointData);
    # the store keeps the null for export, and a sync must carry it over from the file.
    null_flag = {
        (r[0], r[1], r[2]): bool(r[3])
        for r in store.query(
            "SELECT p.uid, c.name, a.resource, a.alloc_resp_json_null FROM allocations a "
            "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id"
        ).rows
    }
    entries = {}
    for e in store.to_checkpoint_data():
        key = (e.pod_uid, e.container_name, e.resource_name)
        if key not in null_flag:
            return None
        if null_flag[key]:
            if e.alloc_resp != b"":
                return None
            e = PodDevicesEntry(e.pod_uid, e.container_name, e.resource_name, e.device_ids, None)
        entries[key] = canonical_entry(e)
    reg = store.query("SELECT resource, is_null FROM registered_resources").rows
    registered: dict[str, Any] = {}
    stored = store.registered_devices()
    for resource, is_null in reg:
        if not is_null and resource not in stored:
            return None
        registered[resource] = None if is_null else tuple(sorted(stored[resource]))
    return entries, registered


def file_state(state: State) -> tuple[dict[Key, Any], dict[str, Any]]:
    return (
        {k: canonical_entry(e) for k, e in state.folded().items()},
        canonical_registered(state.registered),
    )


def counts(events: Sequence[Event]) -> Counter[str]:
    return Counter(e[0] for e in events)


def checkpoint_path(tmp_path: Path) -> Path:
    directory = tmp_path / "device-plugins"
    directory.mkdir(exist_ok=True)
    return directory / "kubelet_internal_checkpoint"


# ---- running the command -----------------------------------------------------------------------


def podstore_command() -> list[str]:
    """argv that runs the installed ``podstore`` with this interpreter's environment."""
    import sys

    installed = Path(sys.executable).parent / "podstore"
    if installed.exists():
        return [str(installed)]
    return [sys.executable, "-c", "from podstore.cli import main; main()"]


def wait_for(predicate: Any, timeout: float, step: float = 0.005) -> float:
    """Seconds until ``predicate()`` was true; raises AssertionError after ``timeout``."""
    import time

    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(step)


class WatchProcess:
    """A ``podstore watch`` subprocess; its log goes to a file. ``command`` replaces the
    argv that runs podstore (a child that changes something first)."""

    def __init__(
        self, db: Path, cp: Path, *args: str, log: Path, command: list[str] | None = None
    ) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*(command or podstore_command()), "--db", str(db), "watch", str(cp), *args],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def log(self) -> str:
        """The log so far, the test's temporary directory shown as ``<tmp>`` (its name must
        not match what a test looks for)."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return text.replace(str(self.log_path.parent), "<tmp>")

    def wait_log(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            m = re.search(pattern, self.log())
            if m:
                found.append(m)
            return m is not None

        try:
            wait_for(seen, timeout, step=0.02)
        except AssertionError:
            raise AssertionError(f"no {pattern!r} in the log:\n{self.log()}") from None
        return found[0]

    def kill(self) -> None:
        """End it at once if it still runs (a test's clean-up) and close its log."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=20)
        finally:
            self._log.close()
        return code


@contextmanager
def log_lines(name: str = "podstore") -> Iterator[list[str]]:
    """``LEVEL message`` of every record logged to logger ``name`` (and below it) in the
    block, captured on that logger itself (the command line stops its propagation)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.levelname} {record.getMessage()}")

    logger = logging.getLogger(name)
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
conn.close()
"""


class WriteLock:
    """Another process holding the store's write lock (``BEGIN IMMEDIATE``) until
    :meth:`release`: every writer meanwhile waits for its busy timeout, then fails busy."""

    def __init__(self, db: Path) -> None:
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "locked", f"the lock holder said {line!r}"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            assert self.proc.wait(timeout=30) == 0

    def __enter__(self) -> WriteLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
