"""A 100,000-entry checkpoint (about 60 MB) reads, verifies and writes in a few seconds.

The read runs in a fresh interpreter so that its peak RSS is its own. Run with ``-s`` to see the
numbers.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from podstore.checkpoint import dumps_checkpoint, write_checkpoint_file
from podstore.deviceplugin import ContainerAllocateResponse
from podstore.types import PodDevicesEntry

ENTRIES = 100_000

# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork and exec, so a child
# of this (large) test process would report the parent's peak.
READER = """
import json, sys, time
from podstore.checkpoint import read_checkpoint
def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
before = peak_kib()
start = time.perf_counter()
cp = read_checkpoint(sys.argv[1])
seconds = time.perf_counter() - start
peak = peak_kib()
print(json.dumps({"seconds": seconds, "peak_kib": peak, "before_kib": before,
                  "entries": len(cp.entries), "checksum": cp.checksum}))
"""


def make_entries(count: int, seed: int = 7) -> list[PodDevicesEntry]:
    """GPU-plugin-like entries: two devices on two NUMA nodes, an AllocResp of ~270 bytes."""
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        gpus = [f"GPU-{uuid.UUID(int=rnd.getrandbits(128))}" for _ in range(2)]
        resp = ContainerAllocateResponse()
        resp.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(gpus)
        resp.envs["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
        for dev in ("/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{i % 8}"):
            resp.devices.add(container_path=dev, host_path=dev, permissions="rw")
        out.append(
            PodDevicesEntry(
                str(uuid.UUID(int=rnd.getrandbits(128))),
                f"ctr-{i % 7}",
                "nvidia.com/gpu",
                {0: gpus[:1], 1: gpus[1:]},
                resp.SerializeToString(),
            )
        )
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_100k_entries_read_verify_and_write_fast(tmp_path: Path) -> None:
    entries = make_entries(ENTRIES)
    registered = {"nvidia.com/gpu": [f"GPU-{i}" for i in range(64)]}
    start = time.perf_counter()
    data = dumps_checkpoint(entries, registered)
    dumps_seconds = time.perf_counter() - start
    path = tmp_path / "kubelet_internal_checkpoint"
    write_checkpoint_file(path, data)
    del entries

    result = subprocess.run(
        [sys.executable, "-c", READER, str(path)], capture_output=True, text=True, check=True
    )
    numbers = json.loads(result.stdout)
    mib = 1024 * 1024
    print(
        f"\n{ENTRIES} entries, {len(data) / mib:.1f} MiB: dumps {dumps_seconds:.2f} s; "
        f"read+verify {numbers['seconds']:.2f} s, peak RSS {numbers['peak_kib'] / 1024:.0f} MiB "
        f"(interpreter alone {numbers['before_kib'] / 1024:.0f} MiB)"
    )
    assert numbers["entries"] == ENTRIES
    # Generous bounds so that a slow CI machine passes; typical: ~1.6 s, ~370 MiB.
    assert numbers["seconds"] < 15
    assert dumps_seconds < 15
    assert numbers["peak_kib"] * 1024 < numbers["before_kib"] * 1024 + 8 * len(data)
