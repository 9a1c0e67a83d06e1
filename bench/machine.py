"""What the numbers were measured on: CPU, memory, disk and filesystem, Python and SQLite."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
import time
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _mount_of(path: str) -> dict[str, str]:
    """Device, mount point, filesystem type and options of the mount holding ``path``."""
    best: dict[str, str] = {}
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                dev, mnt, fstype, opts, *_ = line.split()
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best.get("mount_point", "")):
                    best = {"device": dev, "mount_point": mnt, "fstype": fstype, "options": opts}
    except OSError:
        pass
    return best


def _block_device(dev: str) -> dict[str, str]:
    """Rotational flag and model of a /dev/X block device, from sysfs."""
    name = os.path.basename(dev)
    out: dict[str, str] = {}
    for base in (f"/sys/class/block/{name}", f"/sys/class/block/{name.rstrip('0123456789')}"):
        for key, rel in (("rotational", "queue/rotational"), ("model", "device/model")):
            if key in out:
                continue
            try:
                with open(os.path.join(base, rel), encoding="utf-8") as f:
                    out[key] = f.read().strip()
            except OSError:
                pass
    return out


def _git_commit(repo: str) -> str | None:
    try:
        res = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None


def _git_dirty(repo: str) -> list[str] | None:
    """Files under podstore/ and migrations/ that differ from the commit (what was measured)."""
    try:
        res = subprocess.run(
            ["git", "-C", repo, "status", "--porcelain", "--", "podstore", "migrations"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [line[3:] for line in res.stdout.splitlines() if line.strip()]


def describe(bench_dir: str, repo: str) -> dict[str, Any]:
    """The machine and software the bench ran on; ``bench_dir`` is where its files live."""
    mount = _mount_of(bench_dir)
    import podstore

    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_gib": _mem_total_gib(),
        "kernel": platform.release(),
        "bench_dir": bench_dir,
        "filesystem": mount,
        "block_device": _block_device(mount.get("device", "")),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "podstore": podstore.__version__,
        "git_commit": _git_commit(repo),
        "uncommitted_changes": _git_dirty(repo),
        "load_avg_at_start": list(os.getloadavg()),
    }


def io_counters(bench_dir: str) -> dict[str, float]:
    """Bytes written so far to the bench dir's disk by everyone, and by this process.

    Their difference over a phase is what other processes wrote meanwhile: the noise the
    durable figures of that phase were measured under.
    """
    dev = os.path.basename(_mount_of(bench_dir).get("device", ""))
    out: dict[str, float] = {"time": time.monotonic()}
    try:
        with open("/proc/diskstats", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 9 and parts[2] == dev:
                    out["disk_written"] = int(parts[9]) * 512.0
    except OSError:
        pass
    try:
        with open("/proc/self/io", encoding="utf-8") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    out["own_written"] = float(line.split()[1])
    except OSError:
        pass
    return out


def io_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """MB written to the disk during a phase: in all, by this process, by everyone else."""
    total = after.get("disk_written", 0.0) - before.get("disk_written", 0.0)
    own = after.get("own_written", 0.0) - before.get("own_written", 0.0)
    return {
        "seconds": round(after["time"] - before["time"], 1),
        "disk_mb": round(total / 1e6, 1),
        "own_mb": round(own / 1e6, 1),
        "others_mb": round(max(total - own, 0.0) / 1e6, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
