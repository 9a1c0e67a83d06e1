"""Generated node-scale stores and whole-command measurements, for the CLI scale tests
(tests/test_cli_scale.py) and the by-hand report (tests/harness/cli_scale_report.py).

A store of N entries: N/2 pods, each with a ``main`` container holding two GPUs (one per NUMA
node, a response with envs, device specs and a mount) and a ``sidecar`` holding one SR-IOV VF
without topology. RegisteredDevices lists every held device plus 5% free ones, in one list per
resource — the shape that made ``podstore devices`` quadratic (a registered-device probe per
row). The history holds an ``import`` event per entry, the registered events and, for every
50th pod, a replace and a delete of an extra pod.

Peak memory is measured the way /usr/bin/time does: the command is forked from a small Python
wrapper and its ``ru_maxrss`` read from ``wait4``. (Read straight from a fork of the test
process, it would include the test process's own high-water mark, which Linux carries across
fork and exec.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from podstore import ContainerAllocateResponse, DeviceSpec, PodDevicesEntry, PodStore
from podstore.deviceplugin import Mount

GPU = "nvidia.com/gpu"
VF = "nvidia.com/sriov_rdma"


def pod_uid(i: int) -> str:
    return f"{i:08x}-7c1d-4b8e-9f1a-{i * 2654435761 % (1 << 48):012x}"


def gpu(i: int, n: int) -> str:
    return f"GPU-{i:08x}-{n}"


def vf(i: int) -> str:
    return f"{(i >> 16) & 0xFFFF:04x}:{(i >> 8) & 0xFF:02x}:{(i >> 3) & 0x1F:02x}.{i & 7}"


#: The output formats every listing is measured in.
FORMATS = ("table", "json", "yaml", "csv")

POD = pod_uid(7)
DEVICE = gpu(7, 0)
LATER = "2100-01-01T00:00:00Z"

# (name, command arguments, the API call that answers the same question)
LISTINGS: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("pods", ["pods"], ("pods",)),
    ("get", ["get", POD], ("pod_entries", POD)),
    ("devices", ["devices"], ("devices",)),
    ("devices --resource", ["devices", "--resource", VF], ("devices",)),
    ("owners", ["owners", DEVICE], ("get_pod_and_container_for_device", DEVICE)),
    ("owners --at", ["owners", DEVICE, "--at", LATER], ("owners_at", DEVICE, LATER)),
    ("run-options", ["run-options", POD, "main"], ("device_run_container_options", POD, "main")),
    ("history", ["history"], ("history",)),
    ("history --pod", ["history", "--pod", POD], ("history", f"pod_uid={POD}")),
    ("history --device", ["history", "--device", DEVICE], ("history", f"device_id={DEVICE}")),
    ("sql", ["sql", "SELECT * FROM v_allocations"], ("query", "SELECT * FROM v_allocations")),
    ("status", ["status"], ("stats",)),
]


def _gpu_response(i: int) -> bytes:
    msg = ContainerAllocateResponse()
    msg.envs["NVIDIA_VISIBLE_DEVICES"] = f"{gpu(i, 0)},{gpu(i, 1)}"
    msg.envs["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    for path in ("/dev/nvidiactl", f"/dev/nvidia{i % 8}", f"/dev/nvidia{(i + 1) % 8}"):
        msg.devices.append(DeviceSpec(container_path=path, host_path=path, permissions="rw"))
    msg.mounts.append(
        Mount(container_path="/usr/bin/nvidia-smi", host_path="/usr/bin/nvidia-smi", read_only=True)
    )
    return msg.SerializeToString(deterministic=True)


def _vf_response(i: int) -> bytes:
    msg = ContainerAllocateResponse()
    msg.envs["PCIDEVICE_NVIDIA_COM_SRIOV_RDMA"] = vf(i)
    msg.devices.append(
        DeviceSpec(container_path="/dev/infiniband/rdma_cm", host_path="/dev/infiniband/rdma_cm")
    )
    return msg.SerializeToString(deterministic=True)


def entries(count: int) -> list[PodDevicesEntry]:
    """``count`` entries (rounded down to even): two per pod."""
    out: list[PodDevicesEntry] = []
    for i in range(count // 2):
        uid = pod_uid(i)
        out.append(PodDevicesEntry(uid, "main", GPU, {0: [gpu(i, 0)], 1: [gpu(i, 1)]},
                                   _gpu_response(i)))  # fmt: skip
        out.append(PodDevicesEntry(uid, "sidecar", VF, {-1: [vf(i)]}, _vf_response(i)))
    return out


def build(path: Path, count: int) -> Path:
    """Create the store of ``count`` entries at ``path`` (which must not exist)."""
    pods = count // 2
    with PodStore.open(path, verify="off") as store:
        store.from_checkpoint_data(entries(count))
        extra = pods + pods // 20 + 1
        store.set_registered_devices(
            {
                GPU: [gpu(i, n) for i in range(extra) for n in (0, 1)],
                VF: [vf(i) for i in range(extra)],
            }
        )
        with store.transaction():
            for i in range(0, pods, 50):
                store.insert(pod_uid(i), "main", GPU, {0: [gpu(i, 0)], 1: [gpu(i, 1)]},
                             _gpu_response(i))  # fmt: skip
                store.insert(f"gone-{i}", "main", GPU, {0: [gpu(extra + i, 0)]}, None)
                store.delete([f"gone-{i}"])
    return path


# ---- measuring a whole command -----------------------------------------------------------------

_WRAPPER = """
import json, os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(report, "w") as f:
    json.dump({"code": os.waitstatus_to_exitcode(status), "wall_s": wall,
               "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kib": usage.ru_maxrss}, f)
"""


@dataclass(frozen=True)
class Measured:
    """One run of a command: exit code, wall time, CPU time (user + system), peak RSS, stderr,
    stdout size."""

    code: int
    wall_s: float
    cpu_s: float
    peak_rss_kib: int
    stderr: str
    stdout_bytes: int

    @property
    def peak_rss_mib(self) -> float:
        return self.peak_rss_kib / 1024


def measure(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdout: Path | None = None,
    timeout: float = 600,
) -> Measured:
    """Run ``argv`` to completion; its stdout goes to ``stdout`` (default: discarded, but
    counted)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        out_path = stdout or Path(tmp) / "stdout"
        with open(out_path, "wb") as out, open(Path(tmp) / "stderr", "w+b") as err:
            subprocess.run(
                [sys.executable, "-c", _WRAPPER, str(report), *argv],
                stdout=out,
                stderr=err,
                env=env if env is not None else os.environ.copy(),
                timeout=timeout,
                check=True,
            )
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        data = json.loads(report.read_text())
        return Measured(
            int(data["code"]),
            float(data["wall_s"]),
            float(data["cpu_s"]),
            int(data["peak_rss_kib"]),
            stderr,
            out_path.stat().st_size,
        )


def podstore_argv(*args: str) -> list[str]:
    """The installed ``podstore`` command (or the module, where it is not installed)."""
    script = Path(sys.executable).parent / "podstore"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from podstore.cli import main; main()", *args]


# The API call each listing command answers, as a user's script would make it: open the
# store read-only (without the open-time check, as the read commands do) and take the whole
# answer. Run in a child process like the command, so both pay the same start-up.
_API = """
import sys
import podstore
db, call = sys.argv[1], sys.argv[2]
args = [a for a in sys.argv[3:] if "=" not in a]
kwargs = dict(a.split("=", 1) for a in sys.argv[3:] if "=" in a)
store = podstore.PodStore.open(db, readonly=True, verify="off")
result = getattr(store, call)(*args, **kwargs)
rows = getattr(result, "rows", result)
print(len(rows) if hasattr(rows, "__len__") else 1)
"""


def api_argv(db: Path, call: str, *args: str) -> list[str]:
    """The child that makes ``store.CALL(*args)`` (``name=value`` args as keywords)."""
    return [sys.executable, "-c", _API, str(db), call, *args]
