"""Metrics: ``podstore metrics`` (stdout and ``--textfile``) and ``watch --metrics-addr``'s
``/metrics``, parsed with prometheus_client's own parser; every metric of the contract
(docs/watch.md) with its type, labels and value on a store whose content is known."""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from harness.ops_metrics import EXISTING
from harness.watch_support import State, checkpoint_path, podstore_command, random_state, wait_for
from prometheus_client.parser import text_string_to_metric_families

from podstore import ContainerAllocateResponse, PodDevicesEntry, PodStore
from podstore.checkpoint import write_checkpoint_file
from podstore.metrics.collector import registry_for
from podstore.metrics.exposition import render
from podstore.metrics.release import release_collector

GPU, NIC, FPGA = "example.com/gpu", "example.com/nic", "vendor.io/fpga"


def resp(**envs: str) -> bytes:
    return ContainerAllocateResponse(envs=envs).SerializeToString(deterministic=True)


# g1 is held from two pods (a double allocation); pod-a/main's GPU and NIC responses set A
# differently (one run-option conflict); the FPGA is registered and held by nobody.
KNOWN = State(
    [
        PodDevicesEntry("pod-a", "main", GPU, {0: ["g0", "g1"]}, resp(A="1")),
        PodDevicesEntry("pod-a", "main", NIC, {-1: ["n0"]}, resp(A="2")),
        PodDevicesEntry("pod-b", "main", GPU, {1: ["g1"]}, resp()),
        PodDevicesEntry("pod-b", "side", NIC, {0: ["n1", "n2"]}, resp(B="x")),
    ],
    {GPU: ["g0", "g1", "g2"], NIC: [], FPGA: ["f0"]},
)

STORE_METRICS = {
    # name: (type, labels, {label values: value})
    "podstore_pods": ("gauge", (), {(): 2}),
    "podstore_allocations": ("gauge", ("resource",), {(GPU,): 2, (NIC,): 2, (FPGA,): 0}),
    "podstore_allocated_devices": ("gauge", ("resource",), {(GPU,): 2, (NIC,): 3, (FPGA,): 0}),
    "podstore_registered_devices": ("gauge", ("resource",), {(GPU,): 3, (NIC,): 0, (FPGA,): 1}),
    "podstore_double_allocated_devices": (
        "gauge",
        ("resource",),
        {(GPU,): 1, (NIC,): 0, (FPGA,): 0},
    ),
    "podstore_run_option_conflicts": ("gauge", (), {(): 1}),
}


def parse(text: str) -> dict[str, Any]:
    """name → family, as Prometheus reads the exposition."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def values(family: Any, suffix: str = "") -> dict[tuple[str, ...], float]:
    return {
        tuple(v for k, v in sorted(s.labels.items()) if k != "le"): s.value
        for s in family.samples
        if s.name == family.name + suffix
    }


def check_store_metrics(families: dict[str, Any], db: Path, history: int) -> None:
    for name, (kind, labels, expected) in STORE_METRICS.items():
        family = families[name]
        assert family.type == kind, name
        assert {tuple(sorted(s.labels)) for s in family.samples} == {labels}, name
        assert values(family) == expected, name
    events = families["podstore_history_events"]
    assert events.type == "gauge" and values(events) == {(): history}
    sizes = families["podstore_store_size_bytes"]
    assert sizes.type == "gauge"
    got = {s.labels["file"]: s.value for s in sizes.samples}
    assert set(got) == {"db", "wal"}
    assert got["db"] > 0 and got["wal"] >= 0


@pytest.fixture
def known(tmp_path: Path) -> tuple[Path, Path, int]:
    """A store synced from KNOWN; (store, checkpoint, history events)."""
    cp = checkpoint_path(tmp_path)
    KNOWN.write(cp)
    db = tmp_path / "store.db"
    with PodStore.open(db) as store:
        store.sync_checkpoint(cp)
        history = len(store.history())
    return db, cp, history


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*podstore_command(), "--db", str(db), *args], capture_output=True, text=True, timeout=60
    )


def test_podstore_metrics_prints_every_store_metric(known: tuple[Path, Path, int]) -> None:
    db, _cp, history = known
    proc = run(db, "metrics")
    assert proc.returncode == 0, proc.stderr
    families = parse(proc.stdout)
    check_store_metrics(families, db, history)
    # Watch-only metrics belong to the follower.
    assert "podstore_checkpoint_syncs" not in families
    assert "podstore_sync_duration_seconds" not in families


def test_textfile_is_replaced_atomically(known: tuple[Path, Path, int], tmp_path: Path) -> None:
    db, _cp, history = known
    out = tmp_path / "textfile" / "podstore.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    proc = run(db, "metrics", "--textfile", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    check_store_metrics(parse(out.read_text()), db, history)
    assert os.listdir(out.parent) == ["podstore.prom"]  # no temp file left behind
    proc = run(db, "metrics", "--textfile", str(tmp_path / "nowhere" / "x.prom"))
    assert proc.returncode == 1 and "cannot write metrics" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_metrics_of_an_empty_and_of_a_missing_store(tmp_path: Path) -> None:
    with PodStore.open(tmp_path / "empty.db"):
        pass
    families = parse(run(tmp_path / "empty.db", "metrics").stdout)
    assert values(families["podstore_pods"]) == {(): 0}
    assert values(families["podstore_allocations"]) == {}
    proc = run(tmp_path / "missing.db", "metrics")
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    assert not (tmp_path / "missing.db").exists()  # read-only: never creates a store


def test_watch_serves_metrics_on_loopback(known: tuple[Path, Path, int], tmp_path: Path) -> None:
    db, cp, history = known
    log = tmp_path / "watch.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [
                *podstore_command(),
                "--db",
                str(db),
                "watch",
                str(cp),
                "--metrics-addr",
                ":0",
                "--interval",
                "3600",
                "--textfile",
                str(tmp_path / "w.prom"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            started = time.time()
            match: list[re.Match[str]] = []

            def serving() -> bool:
                m = re.search(r"serving metrics on http://([\d.]+):(\d+)/metrics", log.read_text())
                match.extend([m] if m else [])
                return m is not None and " INFO following " in log.read_text()

            wait_for(serving, 20, step=0.02)
            host, port = match[0].group(1), int(match[0].group(2))
            assert host == "127.0.0.1"
            url = f"http://{host}:{port}/metrics"
            wait_for(lambda: (tmp_path / "w.prom").exists(), 10)
            families = parse(urllib.request.urlopen(url, timeout=10).read().decode())
            check_store_metrics(families, db, history)  # the start-up sync was unchanged
            syncs = families["podstore_checkpoint_syncs"]
            assert syncs.type == "counter"
            # Labels sort by name: (checkpoint, result); `watch CHECKPOINT` follows devices.
            assert values(syncs, "_total") == {
                ("devices", "applied"): 0,
                ("devices", "unchanged"): 1,
                ("devices", "invalid"): 0,
                ("devices", "missing"): 0,
                ("devices", "error"): 0,
            }
            last = families["podstore_checkpoint_last_sync_timestamp_seconds"]
            assert last.type == "gauge"
            assert started - 1 <= values(last)[("devices",)] <= time.time()
            hist = families["podstore_sync_duration_seconds"]
            assert hist.type == "histogram"
            assert values(hist, "_count") == {("devices",): 1}
            buckets = [s for s in hist.samples if s.name.endswith("_bucket")]
            assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 1
            assert [b.value for b in buckets] == sorted(b.value for b in buckets)

            # A bad file is counted, a good one after it too; the textfile follows.
            write_checkpoint_file(cp, b'{"Data":')
            wait_for(lambda: _count(url, "invalid") == 1, 5)
            entries = list(KNOWN.entries or [])
            State(entries[:3], KNOWN.registered).write(cp)
            wait_for(lambda: _count(url, "applied") == 1, 5)
            families = parse(urllib.request.urlopen(url, timeout=10).read().decode())
            assert values(families["podstore_allocations"])[(NIC,)] == 1
            # The textfile is rewritten right after the sync is counted.
            wait_for(
                lambda: (
                    values(
                        parse((tmp_path / "w.prom").read_text())["podstore_checkpoint_syncs"],
                        "_total",
                    )[("devices", "applied")]
                    == 1
                ),
                5,
            )
        finally:
            proc.terminate()
            assert proc.wait(timeout=20) == 0


def _count(url: str, result: str) -> float:
    families = parse(urllib.request.urlopen(url, timeout=10).read().decode())
    return values(families["podstore_checkpoint_syncs"], "_total")[("devices", result)]


@pytest.mark.parametrize("seed", range(6))
def test_held_and_double_counts_equal_the_views(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cp = checkpoint_path(tmp_path)
    random_state(rng, 30).write(cp)
    with PodStore.open(tmp_path / "s.db") as store:
        store.sync_checkpoint(cp)
        store.insert("agent", "c", GPU, {0: ["exa-1", "exa-2"]}, None)  # no response: held too
        families = parse(render(registry_for(store)).decode())
        views = {
            name: dict(
                store.query(
                    f"SELECT resource, count(DISTINCT device_id) FROM {view} GROUP BY resource"
                ).rows
            )
            for name, view in (
                ("podstore_allocated_devices", "v_device_owners"),
                ("podstore_double_allocated_devices", "v_double_allocations"),
            )
        }
        conflicts = store.query("SELECT count(*) FROM v_run_option_conflicts").rows[0][0]
    for name, counts in views.items():
        got = {k[0]: v for k, v in values(families[name]).items() if v}
        assert got == counts, name
    assert values(families["podstore_run_option_conflicts"]) == {(): conflicts}


def test_the_contract_table_names_exactly_these_metrics() -> None:
    """docs/watch.md's table and the collector agree (a renamed metric breaks dashboards)."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "watch.md").read_text()
    named = set(re.findall(r"^\| `(podstore_\w+)` \|", doc, re.MULTILINE))
    collected = {
        *STORE_METRICS,
        "podstore_history_events",
        "podstore_store_size_bytes",
        "podstore_checkpoint_syncs_total",
        "podstore_checkpoint_last_sync_timestamp_seconds",
        "podstore_checkpoint_last_failed_sync_timestamp_seconds",
        "podstore_sync_duration_seconds",
        # the CPU, memory and DRA managers (node-state contract)
        "podstore_exclusive_cpus",
        "podstore_shared_cpus",
        "podstore_memory_assigned_bytes",
        "podstore_dra_allocated_devices",
        "podstore_numa_misaligned_containers",
        # allocation intervals (physical-devices contract), and the CRI of watch --cri-socket
        "podstore_device_seconds_total",
        "podstore_cri_up",
        "podstore_cri_polls_total",
        "podstore_cri_ends_total",
        # physical-devices.md
        "podstore_physical_double_allocations",
        # Served when the follower ships (tests/fleet/ scrape them from a shipping watch).
        *(name for name in EXISTING if name.startswith("podstore_ship_")),
        # Served with watch --kubelet-version (test_watch_release scrapes them).
        *(family.name for family in release_collector(list).collect()),
    }
    assert named == collected


def test_watch_textfile_follows_other_writers_and_rests_when_idle(
    known: tuple[Path, Path, int], tmp_path: Path
) -> None:
    db, cp, _history = known
    prom = tmp_path / "w.prom"
    log = tmp_path / "watch.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [
                *podstore_command(),
                "--db",
                str(db),
                "watch",
                str(cp),
                "--interval",
                "0.2",
                "--textfile",
                str(prom),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            wait_for(prom.exists, 20)
            time.sleep(0.5)
            written = prom.stat().st_mtime_ns
            time.sleep(1.0)  # five polling ticks, nothing changed: nothing rewritten
            assert prom.stat().st_mtime_ns == written
            with PodStore.open(db) as store:  # the node agent adds an entry
                store.insert("agent-pod", "c", GPU, {0: ["g9"]}, resp())
            wait_for(lambda: values(parse(prom.read_text())["podstore_pods"]) == {(): 3}, 5)
        finally:
            proc.terminate()
            assert proc.wait(timeout=20) == 0


# A reader in a process of its own: reads the textfile as fast as it can until told to stop,
# and reports every read that is not one whole exposition written by the test (the number of
# samples of one generation, ending with the end marker of that generation).
_TEXTFILE_READER = """
import json, os, re, sys
path, stop, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
reads, bad = 0, []
pattern = re.compile(r'^podstore_test_sample\\{generation="(\\d+)",i="\\d+"\\} ', re.M)
while not os.path.exists(stop):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        continue
    reads += 1
    generations = set(pattern.findall(text))
    end = re.search(r'^podstore_test_end\\{generation="(\\d+)"\\} 1\\.0\\n\\Z', text, re.M)
    whole = (
        len(generations) == 1 and len(pattern.findall(text)) == samples
        and end is not None and {end.group(1)} == generations
    )
    if not whole and len(bad) < 5:
        bad.append(len(text))
print(json.dumps({"reads": reads, "bad": bad}))
"""


class _Generations:
    """A collector whose exposition is large and differs from one write to the next."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.generation = 0

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        g = str(self.generation)
        family = GaugeMetricFamily("podstore_test_sample", "x", labels=["generation", "i"])
        for i in range(self.samples):
            family.add_metric([g, str(i)], float(i))
        yield family
        end = GaugeMetricFamily("podstore_test_end", "last", labels=["generation"])
        end.add_metric([g], 1.0)
        yield end


def test_a_reader_never_sees_a_partial_textfile(tmp_path: Path) -> None:
    """node_exporter may read the file at any moment: every read of a textfile being
    rewritten hundreds of times is one whole exposition, old or new."""
    import json
    import sys

    from prometheus_client import CollectorRegistry

    from podstore.metrics.exposition import write_textfile

    samples, writes = 1000, 200  # about 60 KB a write
    registry = CollectorRegistry()
    collector = _Generations(samples)
    registry.register(collector)
    out = tmp_path / "podstore.prom"
    write_textfile(out, registry)
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", _TEXTFILE_READER, str(out), str(stop), str(samples)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.2)  # the reader is up and reading
        for generation in range(1, writes + 1):
            collector.generation = generation
            write_textfile(out, registry)
    finally:
        stop.touch()
        report = json.loads(reader.communicate(timeout=60)[0])
    assert report["reads"] >= 100, report  # it did read while the writes went on
    assert report["bad"] == [], report
    assert sorted(os.listdir(tmp_path)) == ["podstore.prom", "stop"]  # no temp file left
