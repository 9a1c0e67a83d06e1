"""Start-up: what a whole process costs before it works (docs/performance.md, "Start-up").

``python -c pass``, ``python -c "import podstore"``, ``podstore --version`` and ``podstore
status`` on a small current store run in turn (A B C D A B C D …), each a fresh process; each
run's CPU time (user + system) is the kernel's account of the finished child (``wait4``).
Figures are medians; a command's ratio to ``python -c pass`` is the median of the ratios of
runs made side by side, so that a machine whose speed drifts during the loop moves both.

Targets (issue 31): ``podstore --version`` ≤ 6× and ``podstore status`` ≤ 12× ``python -c
pass``; ``python -c "import podstore"`` ≤ 80 ms of CPU.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from typing import Any

from bench.sections import RunContext, Section, register

#: The podstore command as installed next to this interpreter (else through the module).
_SCRIPT = os.path.join(os.path.dirname(sys.executable), "podstore")
_PODSTORE = (
    [_SCRIPT] if os.access(_SCRIPT, os.X_OK) else [sys.executable, "-c", "from podstore.cli "
    "import main; main()"]
)  # fmt: skip

#: As installed: Python's bytecode cache on (a shell that turned it off would time the
#: compiler).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

TARGETS = {"version": 6.0, "status": 12.0}
IMPORT_CPU_LIMIT_S = 0.080


def _cpu(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``argv`` to its end, output thrown away."""
    started = os.times().elapsed
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, os.times().elapsed - started


def run(ctx: RunContext) -> dict[str, Any]:
    from podstore import PodStore

    d = os.path.join(ctx.workdir, "startup")
    os.makedirs(d, exist_ok=True)
    db = os.path.join(d, "small.db")
    with PodStore.open(db) as store:
        for i in range(5):
            store.insert(f"pod-{i}", "main", "nvidia.com/gpu", {0: [f"GPU-{i}"]}, b"")
    commands = {
        "pass": [sys.executable, "-c", "pass"],
        "import": [sys.executable, "-c", "import podstore"],
        "version": [*_PODSTORE, "--version"],
        "status": [*_PODSTORE, "--db", db, "status"],
    }
    reps = 2 if ctx.cfg.smoke else 10
    for argv in commands.values():  # warm-up: caches, bytecode
        _cpu(argv)
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(reps):
        for name, argv in commands.items():
            c, w = _cpu(argv)
            cpu[name].append(c)
            wall[name].append(w)
    shutil.rmtree(d, ignore_errors=True)
    ctx.log(f"  startup: {reps} runs of each command")
    return {
        "runs": reps,
        "cpu_s": {name: statistics.median(v) for name, v in cpu.items()},
        "wall_s": {name: statistics.median(v) for name, v in wall.items()},
        "cpu_ratio": {
            name: statistics.median(a / b for a, b in zip(cpu[name], cpu["pass"], strict=True))
            for name in commands
            if name != "pass"
        },
    }


LABELS = {
    "pass": "python -c pass",
    "import": 'python -c "import podstore"',
    "version": "podstore --version",
    "status": "podstore status (small current store)",
}


def verdicts(results: dict[str, Any]) -> list[str]:
    out = []
    for name, limit in TARGETS.items():
        ratio = results["cpu_ratio"][name]
        verdict = "PASS" if ratio <= limit else "MISS"
        out.append(f"{LABELS[name]} ≤ {limit:g}× python -c pass: {ratio:.2f}× — {verdict}")
    cpu = results["cpu_s"]["import"]
    verdict = "PASS" if cpu <= IMPORT_CPU_LIMIT_S else "MISS"
    out.append(f"{LABELS['import']} ≤ 80 ms CPU: {cpu * 1e3:.1f} ms — {verdict}")
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "",
        "## Start-up (whole processes)",
        "",
        f"Medians of {results['runs']} runs of each, in turn; CPU = user + system of the "
        "finished process.",
        "",
        "| command | CPU | wall | CPU ÷ python -c pass |",
        "|---|---|---|---|",
    ]
    for name, label in LABELS.items():
        ratio = results["cpu_ratio"].get(name)
        lines.append(
            f"| `{label}` | {results['cpu_s'][name] * 1e3:.1f} ms | "
            f"{results['wall_s'][name] * 1e3:.1f} ms | "
            f"{'1' if ratio is None else f'{ratio:.2f}'}× |"
        )
    lines += ["", "Targets:", "", *(f"- {v}" for v in verdicts(results)), ""]
    return "\n".join(lines)


register(Section("startup", "CLI and import start-up vs python -c pass", run, render=markdown))
