"""End to end with the real monitoring stack: a real Prometheus server (the distribution's
binary) with the shipped configuration's scrape rules and the shipped alerting rules scrapes a
real ``podstore watch --metrics-addr`` following a checkpoint file and shipping to a real
PostgreSQL (``--ship-to-file``, as the DaemonSet runs it); a double allocation written
into that file makes its alert pending; every dashboard panel's query returns data; a real
node_exporter reading ``podstore metrics --textfile`` exposes the same values.

Never skipped: without the binaries the fixtures fail and say how to get them (.ci/run
installs the packages). Short intervals (1 s scrapes and rule evaluations) keep the module
within a few tens of seconds; every wait is a bounded poll with a generous limit.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.nodegen import Node
from harness.ops_metrics import EXISTING, PENDING, metric_names
from harness.pgserver import fleet_database
from harness.promserver import BinaryUnavailable, NodeExporter, Prometheus, get
from harness.watch_support import podstore_command
from prometheus_client.parser import text_string_to_metric_families

from podstore import ContainerAllocateResponse, PodDevicesEntry
from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "podstore-rules.yaml"
DASHBOARD = DEPLOY / "grafana" / "podstore.json"
GPU, NIC = "example.com/gpu", "example.com/nic"
# The release whose verdicts the watch exports: before DRA's data format (1.31), so that the
# node's DRA file is refused and the gauge has a 1 to show.
RELEASE = "1.30"
_SERVING = re.compile(r"serving metrics on http://([0-9.]+):(\d+)/metrics")

# Panels whose metrics no command serves yet (harness/ops_metrics.PENDING): their queries must
# parse and return nothing. This list only shrinks: when the metrics land, the test below
# fails until their titles leave it, and from then on their data is checked like the rest.
PENDING_PANELS: set[str] = set()


def resp(**envs: str) -> bytes:
    return ContainerAllocateResponse(envs=envs).SerializeToString(deterministic=True)


def node_state(*, double: bool, extra: int = 0) -> bytes:
    """A node with three pods on two resources; ``double`` gives pod-c the GPU pod-a holds;
    ``extra`` adds that many more single-GPU pods (a rewrite that changes something)."""
    entries = [
        PodDevicesEntry("pod-a", "main", GPU, {0: ["gpu-0"]}, resp(NVIDIA_VISIBLE_DEVICES="0")),
        PodDevicesEntry("pod-a", "main", NIC, {-1: ["nic-0"]}, resp()),
        PodDevicesEntry("pod-b", "main", GPU, {1: ["gpu-1"]}, resp(NVIDIA_VISIBLE_DEVICES="1")),
    ]
    if double:
        entries.append(PodDevicesEntry("pod-c", "main", GPU, {0: ["gpu-0"]}, resp()))
    for i in range(extra):
        entries.append(PodDevicesEntry(f"pod-x{i}", "main", GPU, {1: [f"gpu-x{i}"]}, resp()))
    registered = {GPU: ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], NIC: ["nic-0", "nic-1"]}
    return dumps_checkpoint(entries, registered)


@dataclass
class Follower:
    proc: subprocess.Popen[bytes]
    db: Path
    checkpoint: Path
    address: str  # host:port of its /metrics

    def write(self, data: bytes) -> None:
        write_checkpoint_file(self.checkpoint, data)


def wait(predicate: Any, timeout: float, what: str, step: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(step)


@pytest.fixture(scope="module")
def fleet_url() -> Iterator[str]:
    """A throwaway PostgreSQL with the fleet schema, for the follower to ship to."""
    with fleet_database("ops") as url:
        yield url


@pytest.fixture(scope="module")
def follower(tmp_path_factory: pytest.TempPathFactory, fleet_url: str) -> Iterator[Follower]:
    # The whole node (watch --kubelet-dir): the CPU, memory and DRA managers' files beside the
    # device manager's, with a topology and pod names, so that every panel has data; shipping
    # to a real PostgreSQL as the DaemonSet does.
    root = tmp_path_factory.mktemp("node")
    url_file = root / "fleet-url"
    url_file.write_text(fleet_url + "\n")
    url_file.chmod(0o600)
    kubelet, sysfs, pod_logs = Node(4, misaligned={1}).write_all(root)
    checkpoint = kubelet / "device-plugins" / "kubelet_internal_checkpoint"
    write_checkpoint_file(checkpoint, node_state(double=False))
    db = root / "store" / "podstore.db"
    log = root / "watch.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [*podstore_command(), "--db", str(db), "watch", "--kubelet-dir", str(kubelet),
             "--sysfs", str(sysfs), "--pod-logs", str(pod_logs),
             "--metrics-addr", "127.0.0.1:0", "--interval", "1",
             "--ship-to-file", str(url_file), "--node", "ops-node",
             "--kubelet-version", RELEASE],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    try:
        found = wait(
            lambda: proc.poll() is not None or _SERVING.search(log.read_text()),
            60,
            "podstore watch serving its metrics",
        )
        assert proc.poll() is None, log.read_text()
        yield Follower(proc, db, checkpoint, f"{found[1]}:{found[2]}")
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()


def prometheus_config(target: str) -> dict[str, Any]:
    """The shipped prometheus.yml, its podstore job pointed at ``target``: its relabelling
    (the ``node`` label) as shipped; 1 s intervals; the shipped rules file."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "podstore"]
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    config["scrape_configs"] = [job]
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"] == [RULES.name]
    config["rule_files"] = [str(RULES)]
    return config


@pytest.fixture(scope="module")
def prometheus(follower: Follower) -> Iterator[Prometheus]:
    try:
        server = Prometheus(prometheus_config(follower.address))
    except BinaryUnavailable as exc:
        pytest.fail(str(exc))
    try:
        server.start()
        # Scraping, and the rules loaded.
        wait(lambda: server.query('podstore_pods{job="podstore"}'), 60, "a first scrape")
        groups = server.api("rules")["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} >= {"PodstoreDoubleAllocatedDevices"}
        yield server
    finally:
        server.stop()


def double_alert(server: Prometheus) -> list[dict[str, Any]]:
    return [
        a for a in server.alerts() if a["labels"]["alertname"] == "PodstoreDoubleAllocatedDevices"
    ]


def test_double_allocation_makes_its_alert_pending(
    follower: Follower, prometheus: Prometheus
) -> None:
    (target,) = prometheus.targets()
    assert target["labels"]["node"] == follower.address.rpartition(":")[0]
    # Rules are evaluated against the clean node for a few rounds: silent.
    wait(
        lambda: prometheus.query("podstore_double_allocated_devices"),
        30,
        "the double-allocation gauge scraped",
    )
    time.sleep(3)
    assert double_alert(prometheus) == []

    follower.write(node_state(double=True))
    (alert,) = wait(lambda: double_alert(prometheus), 60, "the double-allocation alert")
    assert alert["state"] in ("pending", "firing")
    assert alert["labels"]["resource"] == GPU
    assert alert["labels"]["severity"] == "critical"
    assert float(alert["value"]) == 1
    node = target["labels"]["node"]
    assert alert["annotations"]["summary"].endswith(f"on {node}")
    assert f"podstore devices --resource {GPU}" in alert["annotations"]["description"]
    # The NIC has no double allocation, and no other alert of the rules fires on this node
    # but kubelet 1.30's refusal of the DRA file (pending for its 10 minutes) and the
    # physical double allocation (the same GPU, by its device ID: no CDI spec names it).
    others = {(a["labels"]["alertname"], a["labels"].get("kind")) for a in prometheus.alerts()}
    assert others == {
        ("PodstoreDoubleAllocatedDevices", None),
        ("PodstorePhysicalDoubleAllocation", None),
        ("PodstoreKubeletReleaseRefuses", "dra"),
    }


def panel_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def instant(expr: str) -> str:
    """A panel's query as Grafana sends it with every node selected."""
    return expr.replace("$__rate_interval", "1m").replace("$node", ".*")


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def test_every_dashboard_panel_returns_data(follower: Follower, prometheus: Prometheus) -> None:
    def served_now() -> set[str]:
        body = get(f"http://{follower.address}/metrics").decode()
        return {s.name for f in text_string_to_metric_families(body) for s in f.samples}

    # The lag and last-seq gauges appear once the fleet database first answered a ship.
    expected = {n for n in EXISTING if n.startswith("podstore_")}
    wait(lambda: expected <= served_now(), 60, "every existing metric served")
    served = served_now()
    assert not served & PENDING, (
        f"{sorted(served & PENDING)} are served now: move them from PENDING to EXISTING in "
        "tests/harness/ops_metrics.py and their panels out of PENDING_PANELS"
    )

    # Changes within the rate window, so that rates and latency quantiles have data.
    for extra in (1, 2, 3):
        follower.write(node_state(double=True, extra=extra))
        time.sleep(1.2)

    pending_panels = set()
    for title, expr in panel_queries():
        names = metric_names(expr)
        assert names, (title, expr)
        query = instant(expr)
        if names & PENDING:
            pending_panels.add(title)
            # Parses (the API refuses a bad query) and has nothing yet.
            assert prometheus.query(query) == [], (title, query)
            continue
        wait(lambda q=query: finite(prometheus.query(q)), 30, f"data for {title!r}: {query}")
    assert pending_panels == PENDING_PANELS


def parse_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_node_exporter_textfile_exposes_the_same_values(follower: Follower, tmp_path: Path) -> None:
    collector_dir = tmp_path / "textfile_collector"
    collector_dir.mkdir()
    textfile = collector_dir / "podstore.prom"
    run = subprocess.run(
        [*podstore_command(), "--db", str(follower.db), "metrics", "--textfile", str(textfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    written = parse_samples(textfile.read_text())
    assert any(name == "podstore_double_allocated_devices" for name, _ in written)
    try:
        exporter = NodeExporter(collector_dir)
    except BinaryUnavailable as exc:
        pytest.fail(str(exc))
    try:
        exporter.start()
        exposed = parse_samples(exporter.metrics())
    finally:
        exporter.stop()
    assert exposed[("node_textfile_scrape_error", ())] == 0
    podstore = {k: v for k, v in exposed.items() if k[0].startswith("podstore_")}
    assert podstore == written
    assert written[("podstore_double_allocated_devices", (("resource", GPU),))] == 1
    assert written[("podstore_registered_devices", (("resource", NIC),))] == 2


def test_release_verdicts_are_scraped(follower: Follower, prometheus: Prometheus) -> None:
    from podstore.checkpoint import FILE_NAMES
    from podstore.checkpoint.releases import parse_release
    from podstore.checkpoint.verdict import judge_file

    kubelet = follower.checkpoint.parent.parent
    release = parse_release(RELEASE)
    expected = {}
    for kind, name in FILE_NAMES.items():
        v = judge_file(kubelet / name, release, {}, kind=kind)
        expected[kind] = (1.0 if v.verdict == "refuse" else 0.0, float(len(v.drops)))
    assert expected["dra"][0] == 1.0, expected

    def scraped(metric: str) -> dict[str, float]:
        rows = prometheus.query(f'{metric}{{kubelet_version="{RELEASE}"}}')
        return {r["metric"]["kind"]: float(r["value"][1]) for r in rows}

    # Scrapes every second; the watch judged each file after its last sync.
    refused = {k: e[0] for k, e in expected.items()}
    drops = {k: e[1] for k, e in expected.items()}
    wait(
        lambda: (
            scraped("podstore_kubelet_release_refused") == refused
            and scraped("podstore_kubelet_release_drops") == drops
        ),
        60,
        f"the verdicts of kubelet {RELEASE} scraped: {expected}",
    )
