"""``python -m bench`` section: device-hours attributed per namespace, against the truth and
against scrapers (docs/physical-devices contract, "Figures").

A synthetic node workload is replayed in real time as kubelet would leave it on disk, under a
real ``podstore watch --kubelet-dir``: pods start on whole GPUs (device plugin), on time-sliced
replicas (``GPU-6::2``: a quarter of a card each) and on DRA devices; lifetimes are long-tailed
from 2 s up (a third shorter than 30 s). A pod's end shows as kubelet and the runtime show it:
the container runtime reports its exit (a real CRI server on a unix socket, which the watch
follows with ``--cri-socket``), its container leaves the CPU manager's file, its DRA claim
leaves the DRA file, or its log directory goes; its device-plugin entry stays in the device
checkpoint until the next allocation, as kubelet keeps it. The runtime lists only the pods
whose end it is to show, so that every kind of evidence ends some. The workload knows when
each pod held what (the truth).

Three attributions of device-seconds per namespace over the replay's window:

- **podstore**: ``podstore usage --by namespace`` on the store the watch kept;
- **scrapers** at 15, 30 and 60 s: at each scrape, every pod holding a device then is billed
  the whole period for it (shares applied), as an exporter that maps a device to a pod only
  while the pod is alive at the scrape;
- the **truth**.

Target: podstore's error per namespace ≤ 1 % of the truth plus one sync latency per interval
(the latency measured here: podstore's interval starts against the true starts).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.sections import RunContext, Section, load_harness, register
from podstore import ContainerAllocateResponse, DeviceSpec, PodDevicesEntry
from podstore.checkpoint import (
    CPUManagerState,
    DRAClaim,
    DRADevice,
    DRAState,
    dumps_checkpoint,
    dumps_cpu_state,
    dumps_dra_state,
    write_checkpoint_file,
)

NAMESPACES = ("team-a", "team-b", "team-c", "team-d")
WHOLE = [f"GPU-{i}" for i in range(6)]  # nvidia.com/gpu, /dev/nvidia0..5
REPLICAS = 4  # GPU-6 and GPU-7 time-sliced, four replicas each
SHARED = [f"GPU-{g}::{r}" for g in (6, 7) for r in range(REPLICAS)]
DRA = [f"gpu-{i}" for i in range(4)]  # driver gpu.example.com, pool node-1
DRIVER = "gpu.example.com"
SCRAPES_S = (15, 30, 60)
PHASES = 10
REPLAY_S = 300.0
SMOKE_S = 12.0
PODSTORE = [sys.executable, "-c", "from podstore.cli import main; main()"]


@dataclass
class Pod:
    uid: str
    namespace: str
    name: str
    mechanism: str  # device-plugin | dra
    resource: str
    device: str
    share: float
    start: float
    end: float
    #: what shows the end: runtime (the CRI reports the exit), cpu (the container leaves the
    #: CPU file), dra, pod-logs
    evidence: str
    logs_gone: float = 0.0
    claim: str = field(default="")


def workload(seconds: float, seed: int) -> list[Pod]:
    """Each device slot runs pods one after another, with short gaps, until ``seconds``."""
    rng = random.Random(seed)
    # Lognormal lifetimes from 2 s up with P(< 30 s) = 1/3 at full length; scaled down with
    # the replay so that a short run still ends pods.
    scale = seconds / REPLAY_S
    mu, sigma = math.log(28) + 0.43 * 1.2, 1.2
    pods: list[Pod] = []
    slots = (
        [("device-plugin", "nvidia.com/gpu", d, 1.0) for d in WHOLE]
        + [("device-plugin", "nvidia.com/gpu.shared", d, 1 / REPLICAS) for d in SHARED]
        + [("dra", DRIVER, d, 1.0) for d in DRA]
    )
    for mechanism, resource, device, share in slots:
        t = rng.uniform(0, 3) * max(scale, 0.1)
        while t < seconds:
            life = max(2.0, (2 + math.exp(rng.gauss(mu, sigma))) * scale)
            i = len(pods)
            uid = f"{i:08x}-0000-4000-8000-{seed:06x}{i:06x}"
            ns = rng.choice(NAMESPACES)
            evidence = "dra" if mechanism == "dra" else rng.choice(("runtime", "cpu", "pod-logs"))
            end = t + life
            gone = end if evidence == "pod-logs" else end + 5 * max(scale, 0.2)
            claim = f"{i:08x}-1111-4000-8000-{seed:06x}{i:06x}"
            pods.append(
                Pod(uid, ns, f"job-{i}", mechanism, resource, device, share, t, end, evidence,
                    gone, claim)
            )  # fmt: skip
            t = end + rng.expovariate(1 / (3 * max(scale, 0.1)))
    return pods


def truth(pods: list[Pod], t0: float, t1: float) -> dict[str, float]:
    out = dict.fromkeys(NAMESPACES, 0.0)
    for p in pods:
        held = min(p.end, t1) - max(p.start, t0)
        if held > 0:
            out[p.namespace] += held * p.share
    return out


def scraped(pods: list[Pod], t0: float, t1: float, period: float, phase: float) -> dict[str, float]:
    """What an exporter bills: a scrape at t bills each holder alive at t the whole period.
    Scrapes fall at ``t0 + phase + k * period``; the window's first ``phase`` seconds are billed
    to whoever the first scrape sees."""
    out = dict.fromkeys(NAMESPACES, 0.0)
    t = t0 + phase
    for p in pods:
        if p.start <= t < p.end:
            out[p.namespace] += phase * p.share
    while t < t1:
        for p in pods:
            if p.start <= t < p.end:
                out[p.namespace] += min(period, t1 - t) * p.share
        t += period
    return out


class Node:
    """The kubelet directory, the pod-log directory and sysfs of the replayed node."""

    def __init__(self, root: str, crimod: Any, cri: Any) -> None:
        self.crimod = crimod
        self.cri = cri  # the CRI server: its containers are what the runtime reports
        self.kubelet = os.path.join(root, "kubelet")
        self.logs = os.path.join(root, "pods")
        self.sysfs = os.path.join(root, "sys")
        os.makedirs(os.path.join(self.kubelet, "device-plugins"))
        os.makedirs(self.logs)
        cpu = os.path.join(self.sysfs, "devices", "system", "node", "node0")
        os.makedirs(cpu)
        with open(os.path.join(cpu, "cpulist"), "w") as f:
            f.write("0-63\n")
        self.entries: dict[str, PodDevicesEntry] = {}  # uid -> entry kept by the device manager
        self.cpu: dict[str, dict[str, frozenset[int]]] = {}
        self.claims: dict[str, DRAClaim] = {}
        self.write_devices()
        self.write_cpu()
        self.write_dra()

    def write_devices(self) -> None:
        registered = {"nvidia.com/gpu": WHOLE, "nvidia.com/gpu.shared": SHARED}
        data = dumps_checkpoint(list(self.entries.values()), registered)
        write_checkpoint_file(
            os.path.join(self.kubelet, "device-plugins", "kubelet_internal_checkpoint"), data
        )

    def write_cpu(self) -> None:
        used = frozenset(c for pod in self.cpu.values() for s in pod.values() for c in s)
        state = CPUManagerState("static", frozenset(range(64)) - used, dict(self.cpu))
        write_checkpoint_file(
            os.path.join(self.kubelet, "cpu_manager_state"), dumps_cpu_state(state)
        )

    def write_dra(self) -> None:
        state = DRAState(list(self.claims.values()))
        write_checkpoint_file(
            os.path.join(self.kubelet, "dra_manager_state"), dumps_dra_state(state)
        )

    def start(self, pod: Pod, alive: set[str]) -> None:
        os.makedirs(os.path.join(self.logs, f"{pod.namespace}_{pod.name}_{pod.uid}", "main"))
        if pod.mechanism == "dra":
            self.claims[pod.uid] = DRAClaim(
                pod.claim, f"{pod.name}-gpu", pod.namespace, frozenset({pod.uid}),
                {DRIVER: [DRADevice("node-1", pod.device, ["gpu"],
                                    [f"k8s.{DRIVER}/gpu={pod.device}"])]},
            )  # fmt: skip
            self.write_dra()
            return
        if pod.evidence == "runtime":
            running = self.crimod.FakeContainer(pod.uid, pod.uid, "main", running=True)
            self.cri.containers = [*self.cri.containers, running]
        if pod.evidence == "cpu":
            slot = len(self.cpu) % 32
            self.cpu[pod.uid] = {"main": frozenset({2 * slot, 2 * slot + 1})}
            self.write_cpu()
        # An allocation: kubelet drops the entries of pods no longer active, then adds this one.
        for uid in [u for u in self.entries if u not in alive]:
            del self.entries[uid]
        minor = int(pod.device.split("-")[1].split("::")[0])
        resp = ContainerAllocateResponse()
        resp.devices.append(
            DeviceSpec(container_path=f"/dev/nvidia{minor}", host_path=f"/dev/nvidia{minor}",
                       permissions="rw")
        )  # fmt: skip
        self.entries[pod.uid] = PodDevicesEntry(
            pod.uid, "main", pod.resource, {0: [pod.device]}, resp.SerializeToString()
        )
        self.write_devices()

    def end(self, pod: Pod) -> None:
        if pod.evidence == "runtime":
            exited = self.crimod.FakeContainer(
                pod.uid, pod.uid, "main", finished_at=time.time_ns(), created_at=1
            )
            self.cri.containers = [c if c.id != pod.uid else exited for c in self.cri.containers]
        if pod.mechanism == "dra":
            del self.claims[pod.uid]
            self.write_dra()
        elif pod.evidence == "cpu":
            del self.cpu[pod.uid]
            self.write_cpu()

    def logs_gone(self, pod: Pod) -> None:
        shutil.rmtree(os.path.join(self.logs, f"{pod.namespace}_{pod.name}_{pod.uid}"))


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _podstore(*args: str) -> Any:
    done = subprocess.run(
        [*PODSTORE, *args, "-o", "json"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def _drive(
    node: Node, pods: list[Pod], steps: list[tuple[float, int, str, Pod]], seconds: float
) -> tuple[float, float, dict[str, list[float]]]:
    """Rewrite the node's files at the workload's times; the window and each pod's wall
    start and end as the files showed them."""
    time.sleep(2.0)  # the watch's first sync of the empty node (nothing held: not billed)
    t0 = time.time()
    alive: set[str] = set()
    real = {p.uid: [0.0, 0.0] for p in pods}
    for at, _order, what, p in steps:
        if at > seconds:
            break
        delay = t0 + at - time.time()
        if delay > 0:
            time.sleep(delay)
        now = time.time()
        if what == "start":
            alive.add(p.uid)
            real[p.uid][0] = now
            node.start(p, alive)
        elif what == "end":
            alive.discard(p.uid)
            real[p.uid][1] = now
            node.end(p)
        else:
            node.logs_gone(p)
    t1 = t0 + seconds
    time.sleep(max(0.0, t1 - time.time()) + 3.0)  # the last rewrites synced
    return t0, t1, real


def replay(workdir: str, seconds: float, seed: int, log: Any) -> dict[str, Any]:
    d = os.path.join(workdir, "attribution")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    crimod = load_harness("criserver")
    # A unix socket's path has a 108-byte limit, which a deep work directory can pass.
    sockdir = tempfile.mkdtemp(prefix="podstore-cri-")
    socket = os.path.join(sockdir, "cri.sock")
    cri = crimod.CriServer(crimod.Path(socket))
    cri.server.start()
    node = Node(d, crimod, cri)
    db = os.path.join(d, "store.db")
    pods = workload(seconds, seed)
    steps: list[tuple[float, int, str, Pod]] = []
    for p in pods:
        steps.append((p.start, 1, "start", p))
        steps.append((p.end, 0, "end", p))
        if p.logs_gone != p.end:
            steps.append((p.logs_gone, 2, "logs", p))
        else:
            steps.append((p.end, 0, "logs", p))
    steps.sort(key=lambda s: (s[0], s[1]))
    with open(os.path.join(d, "watch.log"), "wb") as err:
        watch = subprocess.Popen(
            [*PODSTORE, "--db", db, "watch", "--kubelet-dir", node.kubelet,
             "--pod-logs", node.logs, "--sysfs", node.sysfs, "--interval", "0.5",
             "--cri-socket", socket],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            t0, t1, real = _drive(node, pods, steps, seconds)
        finally:
            watch.send_signal(signal.SIGTERM)
            watch.wait(timeout=60)
            cri.stop()
            shutil.rmtree(sockdir, ignore_errors=True)
    # The truth on the wall clock the files were written on (the driver's own lateness in).
    timeline = [
        Pod(p.uid, p.namespace, p.name, p.mechanism, p.resource, p.device, p.share,
            real[p.uid][0], real[p.uid][1] or math.inf, p.evidence)
        for p in pods if real[p.uid][0]
    ]  # fmt: skip
    want = truth(timeline, t0, t1)
    rows = _podstore("--db", db, "usage", "--by", "namespace", "--since", _iso(t0),
                     "--until", _iso(t1))  # fmt: skip
    got = {r["namespace"]: float(r["device_seconds"]) for r in rows}
    intervals = _podstore(
        "--db", db, "sql",
        "SELECT pod_uid, start, \"end\", end_source FROM v_allocation_intervals",
    )  # fmt: skip
    # How late podstore saw each start and each end that fell in the window (its sync latency:
    # a file rewrite is seen at once, a pod-log directory at the next polling tick).
    truth_of = {p.uid: p for p in timeline}
    lags: list[float] = []
    end_lags: dict[str, list[float]] = {}
    for r in intervals:
        held = truth_of.get(r["pod_uid"])
        if held is None:
            continue
        lags.append(datetime.fromisoformat(r["start"]).timestamp() - held.start)
        if r["end"] is not None and held.end <= t1:
            lag = datetime.fromisoformat(r["end"]).timestamp() - held.end
            lags.append(lag)
            end_lags.setdefault(str(r["end_source"]), []).append(lag)
    latency = statistics.median(lags) if lags else math.nan
    per_ns: dict[str, dict[str, Any]] = {}
    for ns in NAMESPACES:
        n = sum(1 for p in timeline if p.namespace == ns and p.start < t1)
        bound = 0.01 * want[ns] + n * latency
        per_ns[ns] = {
            "truth_s": want[ns],
            "podstore_s": got.get(ns, 0.0),
            "intervals": n,
            "bound_s": bound,
            # A scraper's error depends on where its scrapes fall: the mean absolute error
            # over PHASES evenly spaced phases of the period.
            **{
                f"scrape_{s}s": statistics.fmean(
                    abs(scraped(timeline, t0, t1, s, s * k / PHASES)[ns] - want[ns])
                    for k in range(PHASES)
                )
                for s in SCRAPES_S
            },
        }
    sources: dict[str, int] = {}
    for r in intervals:
        sources[str(r["end_source"])] = sources.get(str(r["end_source"]), 0) + 1
    log(f"  attribution: {len(timeline)} pods over {seconds:.0f} s, latency {latency:.3f} s")
    return {
        "seconds": seconds,
        "pods": len(timeline),
        "sync_latency_s": latency,
        "end_lag_s": {k: statistics.median(v) for k, v in sorted(end_lags.items())},
        "end_sources": sources,
        "namespaces": per_ns,
    }


def run(ctx: RunContext) -> dict[str, Any]:
    smoke = getattr(ctx.cfg, "smoke", False)
    seconds = SMOKE_S if smoke else REPLAY_S
    return replay(ctx.workdir, seconds, getattr(ctx.cfg, "seed", 1), ctx.log)


def _err(got: float, want: float) -> str:
    return f"{100 * (got - want) / want:+.1f} %" if want else "—"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "",
        f"## Device-seconds per namespace: podstore against scrapers ({results['pods']} pods "
        f"replayed over {results['seconds']:.0f} s under `podstore watch`)",
        "",
        "| namespace | truth (s) | podstore (s) | error | bound (1 % + a sync latency per "
        "interval) | "
        + " | ".join(f"scrape every {s} s: mean abs. error" for s in SCRAPES_S)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(SCRAPES_S),
    ]
    misses = 0
    for ns, r in results["namespaces"].items():
        off = abs(r["podstore_s"] - r["truth_s"])
        ok = off <= r["bound_s"]
        misses += not ok
        scrapes = " | ".join(
            f"±{r[f'scrape_{s}s']:.1f} (±{100 * r[f'scrape_{s}s'] / r['truth_s']:.1f} %)"
            if r["truth_s"]
            else "—"
            for s in SCRAPES_S
        )
        lines.append(
            f"| {ns} | {r['truth_s']:.1f} | {r['podstore_s']:.1f} | "
            f"{_err(r['podstore_s'], r['truth_s'])} | {r['bound_s']:.1f} "
            f"({'PASS' if ok else 'MISS'}) | {scrapes} |"
        )
    lines += [
        "",
        f"Sync latency (median over every start and end podstore recorded, against the "
        f"workload's): {1e3 * results['sync_latency_s']:.0f} ms; median end lag by source: "
        + ", ".join(f"{k} {1e3 * v:.0f} ms" for k, v in results["end_lag_s"].items())
        + ". Ends by source: "
        + ", ".join(f"{k} {v}" for k, v in sorted(results["end_sources"].items()))
        + f". Target met in {len(results['namespaces']) - misses} of "
        f"{len(results['namespaces'])} namespaces.",
        "",
    ]
    return "\n".join(lines)


register(Section("attribution", "device-seconds per namespace: podstore vs scrapers vs truth",
                 run, render=markdown))  # fmt: skip
