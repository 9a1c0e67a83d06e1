"""What one node's ``podstore watch`` costs: peak and resident memory, CPU per sync and per
scrape, at a given number of checkpoint entries — the figures behind the DaemonSet's requests
and limits and the systemd units' memory settings (docs/deploy.md).

A real ``podstore watch --metrics-addr 127.0.0.1:0`` subprocess follows a checkpoint of N
entries (tests/harness/scale_store.py's node shape: two entries per pod, GPUs on two NUMA
nodes and an SR-IOV VF, RegisteredDevices listing every held device plus 5 %):

1. ``first``: start on a new store, first sync of the whole file (what a new node does);
2. ``change``: a rewrite with one changed entry, synced;
3. ``scrape``: one ``GET /metrics`` (reads the whole store);
4. ``restart``: a second process on the existing store (cold caches, the file unchanged),
   then a change and a scrape again;
5. ``idle``: resident memory after the cycle.

With a fleet database (``fleet_url``), the watch also ships (``--ship-to-file``) after its
start and after every applied sync, as the DaemonSet does: each phase then ends only after
its ship was logged, so the ship's memory and CPU are in the phase's figures.

Memory is read from ``/proc/PID/status`` (``VmHWM``, the peak resident set, and ``VmRSS``),
CPU from ``/proc/PID/stat`` (every thread, ended ones too). A phase is over when the process has
used no CPU for 0.5 s (a sync never sleeps), checked afterwards through the sync counters.

By hand: ``PYTHONPATH=tests python -m harness.ops_resources [--fleet] 1000 10000`` prints one
JSON object a size (``--fleet`` starts a throwaway PostgreSQL, tests/harness/pgserver.py).
``tests/test_deploy_resources.py`` runs it at 1,000 entries and holds the manifests' limits
against it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.scale_store import GPU, VF, entries, gpu, vf
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file

_SERVING = re.compile(rb"serving metrics on http://([0-9.]+):(\d+)/metrics")
_SYNCS = re.compile(
    r'^podstore_checkpoint_syncs_total\{checkpoint="devices",result="(\w+)"\} ([0-9.e+]+)$', re.M
)


def podstore_argv() -> list[str]:
    script = Path(sys.executable).parent / "podstore"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from podstore.cli import main; main()"]


def write_node(path: Path, count: int, changed: int = 0) -> None:
    """The checkpoint of ``count`` entries; ``changed`` > 0 moves one entry's GPU (a
    different one for each value), as a kubelet rewrite after one allocation would."""
    es = entries(count)
    if changed:
        k = len(es) // 2
        es[k] = replace(es[k], device_ids={0: [f"GPU-moved-{changed}"]})
    pods = count // 2
    extra = pods + pods // 20 + 1
    registered = {
        GPU: [gpu(i, n) for i in range(extra) for n in (0, 1)],
        VF: [vf(i) for i in range(extra)],
    }
    write_checkpoint_file(path, dumps_checkpoint(es, registered))


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the whole process, its ended threads included (each scrape is
    served by a thread of its own, gone by the time one would read its task entry)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    # Fields 14 and 15 (utime, stime) of proc(5), counted after the command's ")".
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    return out


class Watcher:
    """A ``podstore watch`` subprocess with its metrics on a free loopback port."""

    def __init__(self, db: Path, checkpoint: Path, log: Path, url_file: Path | None = None) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        ship = ["--ship-to-file", str(url_file), "--node", "resources"] if url_file else []
        self.ships = url_file is not None
        self.proc = subprocess.Popen(
            [*podstore_argv(), "--db", str(db), "watch", str(checkpoint),
             "--metrics-addr", "127.0.0.1:0", *ship],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )  # fmt: skip
        self.url = self._wait_serving()

    def _wait_serving(self, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _SERVING.search(self.log_path.read_bytes())
            if found:
                return f"http://{found[1].decode()}:{int(found[2])}/metrics"
            if self.proc.poll() is not None:
                raise RuntimeError(f"podstore watch exited: {self.log_path.read_text()}")
            time.sleep(0.02)
        raise RuntimeError("podstore watch did not serve its metrics")

    def shipped(self) -> int:
        """Ships logged so far (each logs ``shipped N events …``)."""
        return self.log_path.read_bytes().count(b"shipped ")

    def wait_shipped(self, count: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ships and self.shipped() < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"no ship {count}: {self.log_path.read_text()}")
            time.sleep(0.02)

    def settle(self, quiet: float = 0.5, timeout: float = 300.0) -> None:
        """Wait until the process used no CPU for ``quiet`` seconds."""
        deadline = time.monotonic() + timeout
        last = cpu_seconds(self.proc.pid)
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = cpu_seconds(self.proc.pid)
            if now > last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return
        raise RuntimeError("podstore watch never went quiet")

    def scrape(self) -> tuple[str, float]:
        start = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=120) as response:
            body = response.read().decode()
        return body, time.perf_counter() - start

    def syncs(self) -> dict[str, int]:
        body, _ = self.scrape()
        return {r: int(float(v)) for r, v in _SYNCS.findall(body)}

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self._log.close()


def _phase(w: Watcher, before: float, ships: int = 0) -> dict[str, Any]:
    w.wait_shipped(ships)
    w.settle()
    mem = memory_kib(w.proc.pid)
    return {
        "cpu_s": round(cpu_seconds(w.proc.pid) - before, 3),
        "peak_rss_mib": round(mem["VmHWM"] / 1024, 1),
        "rss_mib": round(mem["VmRSS"] / 1024, 1),
    }


def _cycle(w: Watcher, checkpoint: Path, count: int, change: int, first: str) -> dict[str, Any]:
    out: dict[str, Any] = {first: _phase(w, 0.0, ships=1)}
    expected = w.syncs()
    before = cpu_seconds(w.proc.pid)
    write_node(checkpoint, count, changed=change)
    out["change"] = _phase(w, before, ships=2)
    after = w.syncs()
    if after.get("applied", 0) != expected.get("applied", 0) + 1:
        raise RuntimeError(f"the change was not applied once: {expected} -> {after}")
    before = cpu_seconds(w.proc.pid)
    body, seconds = w.scrape()
    out["scrape"] = {**_phase(w, before), "wall_s": round(seconds, 3), "bytes": len(body)}
    time.sleep(1.0)
    out["idle_rss_mib"] = round(memory_kib(w.proc.pid)["VmRSS"] / 1024, 1)
    return out


def measure(count: int, workdir: Path, fleet_url: str | None = None) -> dict[str, Any]:
    """The figures of one size (see the module's docstring); with ``fleet_url`` (a fleet
    database at head), shipping too."""
    url_file = None
    if fleet_url is not None:
        url_file = workdir / "fleet-url"
        url_file.write_text(fleet_url + "\n")
        url_file.chmod(0o600)
    plugins = workdir / "device-plugins"
    plugins.mkdir(parents=True)
    checkpoint = plugins / "kubelet_internal_checkpoint"
    db = workdir / "store" / "podstore.db"
    write_node(checkpoint, count)
    result: dict[str, Any] = {"entries": count, "shipping": fleet_url is not None}
    # A new store, then a second process on the store the first left.
    for change, run in enumerate(("new_store", "restart"), start=1):
        w = Watcher(db, checkpoint, workdir / f"watch-{change}.log", url_file)
        try:
            result[run] = _cycle(w, checkpoint, count, change, "first")
        finally:
            code = w.stop()
        if code != 0:
            raise RuntimeError(f"podstore watch exited {code} on SIGTERM")
    sizes = {p.name: p.stat().st_size for p in db.parent.iterdir()}
    result["store_bytes"] = sizes
    result["peak_rss_mib"] = max(
        phase["peak_rss_mib"]
        for run in (result["new_store"], result["restart"])
        for phase in run.values()
        if isinstance(phase, dict)
    )
    return result


def main(argv: list[str]) -> None:
    fleet = "--fleet" in argv
    sizes = [int(a) for a in argv if a != "--fleet"] or [1000]
    server = None
    if fleet:
        from harness.pgserver import PgServer
        from podstore.fleet import migrate

        server = PgServer()
        server.start()
    try:
        for i, size in enumerate(sizes):
            url = None
            if server is not None:
                url = server.create_database(f"resources_{i}")
                migrate.init(url)
            with tempfile.TemporaryDirectory(prefix="podstore-resources-") as tmp:
                print(json.dumps(measure(size, Path(tmp), url)), flush=True)
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main(sys.argv[1:])
