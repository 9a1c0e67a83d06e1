"""``podstore watch --kubelet-dir --cdi-dir`` (a real subprocess): a CDI change is picked up
while following (a directory that goes keeps what it gave), and a cross-mechanism double
allocation is in the view and the metric after the DRA file's rewrite. The time from the
rename to each is measured and printed (the contract's target is 1 s); the assertion is on
what is seen, never on the time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness.nodegen import replace_file
from harness.physical import GPU, PhysicalNode, claim, entry, response, spec
from harness.watch_support import podstore_command, wait_for

from podstore import PodStore, PodStoreError
from podstore.checkpoint import FILE_NAMES, DRAState, dumps_dra_state

WITHIN = 20.0
_SERVING = re.compile(r"serving metrics on (http://[^/\s]+/metrics)")
_METRIC = re.compile(r"^podstore_physical_double_allocations (\S+)$", re.M)


class Watch:
    def __init__(self, root: Path, node: PhysicalNode, cdi: Path, *extra: str) -> None:
        self.root = root
        self.kubelet, written = node.write(root / "node")  # the CDI directory is the test's
        shutil.rmtree(written)
        self.db = root / "s.db"
        self.log_path = root / "watch.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*podstore_command(), "--db", str(self.db), "watch", "--kubelet-dir",
             str(self.kubelet), "--sysfs", str(root / "no-sys"), "--pod-logs",
             str(root / "no-logs"), "--cdi-dir", str(cdi), *extra],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if not self.db.exists():
            return []
        try:
            with PodStore.open(self.db, readonly=True, verify="off") as store:
                return [tuple(r) for r in store.query(sql).rows]
        except PodStoreError:  # the store is still being created at the very start
            return []

    def wait(self, predicate: Any, what: str, step: float = 0.02) -> float:
        try:
            return wait_for(predicate, WITHIN, step=step)
        except AssertionError:
            raise AssertionError(f"{what}: not within {WITHIN} s\n{self.log()}") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        finally:
            self._log.close()


def _write_spec(cdi: Path, cards: int) -> None:
    cdi.mkdir(exist_ok=True)
    replace_file(cdi / "nvidia.json", json.dumps(spec(cards)).encode())


def test_watch_picks_up_a_cdi_change_and_keeps_it_when_the_directory_goes(
    tmp_path: Path,
) -> None:
    node = PhysicalNode(
        entries=[entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",)))],
        registered={GPU: ["GPU-0"]},
    )
    cdi = tmp_path / "cdi"
    watch = Watch(tmp_path, node, cdi, "--interval", "0.3")
    try:
        resolved = "SELECT resolved FROM v_physical_devices"
        watch.wait(lambda: watch.query(resolved) == [(0,)], "the start, unresolved")
        _write_spec(cdi, 1)
        watch.wait(lambda: watch.query(resolved) == [(1,)], "the spec picked up")
        assert "recorded the CDI specs: 3 devices, 1 spec files written" in watch.log()
        # A bad rewrite is said once and keeps what the spec gave.
        replace_file(cdi / "nvidia.json", b"{")
        watch.wait(lambda: "CDI spec skipped" in watch.log(), "the bad spec reported")
        time.sleep(1.0)  # three polling ticks more with the bad spec
        assert watch.query(resolved) == [(1,)]
        assert watch.log().count("CDI spec skipped") == 1
        shutil.rmtree(cdi)
        time.sleep(1.0)  # and with the directory gone
        assert watch.query(resolved) == [(1,)]
    finally:
        assert watch.stop() == 0


def _metric(url: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            found = _METRIC.search(answer.read().decode())
    except OSError:
        return None
    return None if found is None else float(found[1])


def test_a_cross_mechanism_double_allocation_is_in_the_view_and_the_metric(
    tmp_path: Path,
) -> None:
    node = PhysicalNode(
        entries=[entry("a", ["GPU-0"], response(cdi=(f"{GPU}=GPU-0",)))],
        registered={GPU: ["GPU-0"]},
    )
    cdi = tmp_path / "cdi"
    _write_spec(cdi, 2)
    watch = Watch(tmp_path, node, cdi, "--metrics-addr", "127.0.0.1:0")
    try:
        watch.wait(lambda: _SERVING.search(watch.log()) is not None, "the metrics served")
        match = _SERVING.search(watch.log())
        assert match is not None
        url = match[1]
        count = "SELECT count(*) FROM v_physical_devices WHERE resolved"
        watch.wait(lambda: watch.query(count) == [(1,)], "the start-up syncs")
        assert _metric(url) == 0

        second = dumps_dra_state(DRAState([claim("b", ["b"], "gpu-0", [f"{GPU}=GPU-0"])]))
        rows = "SELECT count(*) FROM v_physical_double_allocations"
        renamed = time.monotonic()
        replace_file(watch.kubelet / FILE_NAMES["dra"], second)
        in_view = watch.wait(lambda: watch.query(rows) == [(2,)], "the view", step=0.005)
        in_metric = watch.wait(lambda: _metric(url) == 1, "the metric", step=0.005)
        total = time.monotonic() - renamed
        load = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"\ndetection: rename -> view {in_view * 1000:.0f} ms, -> metric "
            f"{total * 1000:.0f} ms (then {in_metric * 1000:.0f} ms more), load {load}"
        )
    finally:
        assert watch.stop() == 0
