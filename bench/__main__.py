"""``python -m bench``: measure podstore against its baselines and write the results.

Writes ``<out>/latest.json`` and ``<out>/latest.md`` (default ``bench/results``) and the plot
``docs/perf-scaling.png``; prints the tables and a PASS/MISS line per target. Exit status 0
even when a target is missed (the numbers are the output); 1 when the contenders' answers
differed (written, but not comparable); 2 on bad usage.

``python -m bench --smoke`` runs every section at toy sizes into a scratch directory (under a
minute; its figures mean nothing): CI runs it so that the bench cannot rot. The results name
the commit they measured (and any uncommitted changes).
``--only NAME[,NAME]`` runs some sections (bench/sections.py; ``--list`` names them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SIZES = (100, 1_000, 10_000, 100_000)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated pod counts, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("pod counts must be positive")
    return sizes


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="podstore vs kubelet-style checkpointing, raw fsync, raw sqlite3 and "
        "in-memory maps, measured side by side.",
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=DEFAULT_SIZES,
        help="pod counts of the workloads (default 100,1000,10000,100000)",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=None,
        help="calls per contender for per-call figures (default 1000 inserts, 2000 reads; "
        "--quick: 300); slow contenders also stop at their time budget",
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer calls and smaller budgets (< 3 minutes)"
    )
    p.add_argument(
        "--out",
        default=os.path.join(REPO, "bench", "results"),
        help="directory for latest.json and latest.md (default bench/results)",
    )
    p.add_argument(
        "--plot",
        default=os.path.join(REPO, "docs", "perf-scaling.png"),
        help="where to write the scaling plot (default docs/perf-scaling.png); '' for none",
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="directory for the stores and checkpoint files (default: a new temp dir, "
        "removed afterwards); its disk is what the durable figures measure",
    )
    p.add_argument("--seed", type=int, default=20240601, help="workload RNG seed")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated sections to run (see --list); results then hold only those",
    )
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="every section at toy sizes, written to a scratch directory unless --out is "
        "given (under a minute; shows the bench runs, its figures mean nothing)",
    )
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: redraw the tables, latest.md and the plot from <out>/latest.json",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.quick = True
        if args.sizes == DEFAULT_SIZES:
            args.sizes = (10,)
        if args.out == p.get_default("out"):
            args.out = tempfile.mkdtemp(prefix="podstore-bench-smoke-")
        args.plot = ""
    if args.reps is not None and args.reps < 3:
        p.error("--reps must be at least 3")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Imported here so that --help works without the project's dependencies.
    from bench import machine, report, runner, sections, targets

    sections.load_extensions()
    if args.list:
        for section in sections.SECTIONS.values():
            kind = "per size" if section.per_size else "once"
            print(f"{section.name:10} {kind:9} {section.help}")
        return 0
    only = tuple(x.strip() for x in args.only.split(",") if x.strip()) if args.only else None
    sections.selected(only)  # unknown names fail before anything is measured

    if args.render:
        with open(os.path.join(args.out, "latest.json"), encoding="utf-8") as f:
            saved: dict[str, Any] = json.load(f)
        saved.pop("targets", None)
        verdicts = targets.evaluate(saved)
        print(report.console(saved, verdicts) + sections.rendered(saved))
        report.write_json(os.path.join(args.out, "latest.json"), saved, verdicts)
        report.write_text(
            os.path.join(args.out, "latest.md"),
            report.markdown(saved, verdicts) + sections.rendered(saved),
        )
        if args.plot:
            report.plot(saved, args.plot)
        return 0

    cfg = runner.Config.make(args.sizes, args.reps, args.quick, args.seed, args.smoke)
    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix="podstore-bench-") if own_workdir else args.workdir
    os.makedirs(workdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    meta: dict[str, Any] = {
        "command": "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "seed": args.seed,
        "quick": args.quick,
        "smoke": args.smoke,
        "config": dataclasses.asdict(cfg),
        "machine": machine.describe(workdir, REPO),
        "only": list(only) if only else None,
        "sections": [s.name for s in sections.selected(only)],
    }
    log(f"sizes {', '.join(map(str, cfg.sizes))}; files in {workdir}")
    try:
        results: dict[str, Any] = runner.run(cfg, workdir, log, only)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["duration_s"] = time.perf_counter() - t0
    meta["load_avg_at_end"] = list(os.getloadavg())
    results = {"meta": meta, **results}
    verdicts = targets.evaluate(results)
    print(report.console(results, verdicts) + sections.rendered(results))
    report.write_json(os.path.join(args.out, "latest.json"), results, verdicts)
    report.write_text(
        os.path.join(args.out, "latest.md"),
        report.markdown(results, verdicts) + sections.rendered(results),
    )
    if args.plot:
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        if not report.plot(results, args.plot):
            log("matplotlib is not installed: no plot (pip install matplotlib)")
    missed = sum(1 for t in verdicts if t.passed is False)
    log(f"done in {meta['duration_s']:.0f}s: {len(verdicts) - missed} targets met, {missed} missed")
    # A contender that answered differently measured other work: its ratios mean nothing.
    differ = [c for s in results.get("sizes", []) for c in s.get("checks", [])]
    differ += (results.get("fixture") or {}).get("checks", [])
    if differ:
        log(f"answer checks failed ({len(differ)}): {'; '.join(differ)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
