"""Node scale: a sync and the metrics on a generated store of 20,000+ entries — right answers,
the command's time against the matching API call, and peak memory.

The store is built once per session (checkpoint generated with the Go-exact encoder, then
imported); each test works on a copy. Figures are printed (and appended to
$PODSTORE_FIGURES); the speed targets themselves are checked by ``python -m bench``.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.figures import report
from harness.watch_support import State, canonical_event, checkpoint_path, random_state
from prometheus_client.parser import text_string_to_metric_families

from podstore import PodStore
from podstore.metrics.collector import registry_for
from podstore.metrics.exposition import render

ENTRIES = 20_000
#: Peak RSS a node can afford for one of these commands (MB = 10^6 bytes).
PEAK_MB = 400

# Peak RSS of this process: VmHWM (ru_maxrss would count the parent's peak from before exec).
_HWM = """
def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
"""
# Runs the command line in a child that reports its own peak RSS when it exits.
_MEASURED = (
    _HWM
    + """
import atexit, sys
atexit.register(lambda: print("maxrss_kb", hwm_kb(), file=sys.stderr))
from podstore.cli import main
main(sys.argv[1:])
"""
)
_API = (
    _HWM
    + """
import sys, time
from podstore import PodStore
store = PodStore.open(sys.argv[1])
t = time.perf_counter()
if sys.argv[2] == "sync":
    report = store.sync_checkpoint(sys.argv[3])
else:
    from podstore.metrics.collector import registry_for
    from podstore.metrics.exposition import render
    render(registry_for(store))
print(time.perf_counter() - t, hwm_kb())
"""
)


@dataclasses.dataclass
class Big:
    db: Path
    cp: Path
    state: State


@pytest.fixture(scope="session")
def big(tmp_path_factory: pytest.TempPathFactory) -> Big:
    directory = tmp_path_factory.mktemp("watch-scale")
    rng = random.Random(2026)
    state = random_state(rng, ENTRIES * 4 // 9 + 50)
    assert state.entries is not None and len(state.entries) >= ENTRIES
    cp = checkpoint_path(directory)
    state.write(cp)
    db = directory / "big.db"
    with PodStore.open(db) as store:
        store.sync_checkpoint(cp)
    _checkpoint_wal(db)
    return Big(db, cp, state)


def _checkpoint_wal(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _copy(big: Big, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copy(big.db, target)
    return target


def _one_change(big: Big, tmp_path: Path) -> tuple[Path, State]:
    entries = list(big.state.entries or [])
    i = len(entries) // 2
    entries[i] = dataclasses.replace(entries[i], device_ids={0: ["moved-device"]})
    changed = State(entries, big.state.registered)
    cp = checkpoint_path(tmp_path)
    changed.write(cp)
    return cp, changed


def _run_measured(*args: str) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args], capture_output=True, text=True, timeout=300
    )
    seconds = time.perf_counter() - t
    kb = int(proc.stderr.rsplit("maxrss_kb", 1)[1].split()[0])
    return seconds, kb, proc


def _run_api(*args: str) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", _API, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def test_sync_of_one_change_at_20k_entries(big: Big, tmp_path: Path) -> None:
    cp, _changed = _one_change(big, tmp_path)
    synced = _copy(big, tmp_path, "synced.db")
    imported = _copy(big, tmp_path, "imported.db")
    with PodStore.open(synced) as store:
        seq = store.history()[-1].seq
        t = time.perf_counter()
        result = store.sync_checkpoint(cp)
        sync_s = time.perf_counter() - t
        events = [canonical_event(e) for e in store.history() if e.seq > seq]
        assert (result.replaced, result.events) == (1, 1)
        assert events[0][0] == "replace" and events[0][4] == ((0, ("moved-device",)),)
        assert result.entries >= ENTRIES
    with PodStore.open(imported) as store:
        t = time.perf_counter()
        store.import_checkpoint(cp)
        import_s = time.perf_counter() - t
    # The command on a fresh copy, against the same API call in a fresh process.
    cli_db = _copy(big, tmp_path, "cli.db")
    cli_s, cli_kb, proc = _run_measured("--db", str(cli_db), "watch", "--once", str(cp))
    assert proc.returncode == 0, proc.stderr
    api_db = _copy(big, tmp_path, "api.db")
    api_s, api_kb = _run_api(str(api_db), "sync", str(cp))
    report(
        "watch-scale-sync",
        entries=result.entries,
        sync_s=round(sync_s, 3),
        import_s=round(import_s, 3),
        import_over_sync=round(import_s / sync_s, 1),
        cli_once_s=round(cli_s, 3),
        api_sync_s=round(api_s, 3),
        cli_peak_mb=round(cli_kb * 1024 / 1e6),
        api_peak_mb=round(api_kb * 1024 / 1e6),
    )
    assert sync_s < import_s  # sanity; the ratio target is python -m bench's
    assert cli_kb * 1024 / 1e6 < PEAK_MB
    with PodStore.open(cli_db, readonly=True) as a, PodStore.open(synced, readonly=True) as b:
        assert len(a.history()) == len(b.history())


def test_metrics_at_20k_entries(big: Big, tmp_path: Path) -> None:
    db = _copy(big, tmp_path, "metrics.db")
    with PodStore.open(db, readonly=True) as store:
        registry = registry_for(store)
        t = time.perf_counter()
        text = render(registry).decode()
        api_s = time.perf_counter() - t
        pods = store.size()
        allocations = store.stats().allocations
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["podstore_pods"].samples[0].value == pods
    assert sum(s.value for s in families["podstore_allocations"].samples) == allocations
    assert allocations >= ENTRIES
    cli_s, cli_kb, proc = _run_measured("--db", str(db), "metrics")
    assert proc.returncode == 0, proc.stderr
    cli_families = {f.name: f for f in text_string_to_metric_families(proc.stdout)}
    assert cli_families["podstore_pods"].samples[0].value == pods
    report(
        "watch-scale-metrics",
        entries=allocations,
        api_render_s=round(api_s, 3),
        cli_s=round(cli_s, 3),
        cli_peak_mb=round(cli_kb * 1024 / 1e6),
    )
    assert cli_kb * 1024 / 1e6 < PEAK_MB
