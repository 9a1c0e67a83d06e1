"""By-hand measurement of every listing command in every format on a large store, against the
API call that answers the same question (run it from the checkout, not collected by pytest):

    PYTHONPATH=tests python -m harness.cli_scale_report --entries 100000 --rounds 3 \
        [--db /tmp/s100k.db]

Both sides are whole child processes (tests/harness/scale_store.py: the same start-up, the store
opened read-only without the open-time check); the rounds interleave them, so a busy machine
slows both alike. Prints a Markdown table: the command's median wall and CPU (user + system)
time per format and its peak RSS (the largest of its rounds), the API call's beside them, and
the ratio of CPU times (steadier than wall time on a shared machine) and of wall times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from harness import scale_store as ss
from harness.scale_store import FORMATS, LISTINGS


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", type=Path, default=None, help="reuse or build the store here")
    args = parser.parse_args(argv)
    db = args.db or Path(f"/tmp/podstore-cli-scale-{args.entries}.db")
    if not db.exists():
        start = time.perf_counter()
        ss.build(db, args.entries)
        print(f"built {db} ({args.entries} entries) in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)  # fmt: skip
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], int] = {}
    for round_ in range(args.rounds):
        for name, cli_args, call in LISTINGS:
            runs = [("api", ss.api_argv(db, *call))]
            runs += [(fmt, ss.podstore_argv("--db", str(db), *cli_args, "-o", fmt))
                     for fmt in FORMATS]  # fmt: skip
            for kind, argv_ in runs:
                m = ss.measure(argv_)
                if m.code != 0:
                    raise SystemExit(f"{name} {kind}: exit {m.code}: {m.stderr}")
                walls.setdefault((name, kind), []).append(m.wall_s)
                cpus.setdefault((name, kind), []).append(m.cpu_s)
                peaks[(name, kind)] = max(peaks.get((name, kind), 0), m.peak_rss_kib)
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    print(f"{args.entries:,} entries, {args.rounds} rounds: medians of wall and CPU time, the "
          "largest peak RSS\n")  # fmt: skip
    print("| command | format | wall (s) | CPU (s) | peak RSS (MiB) | API call | API wall (s) "
          "| API CPU (s) | API RSS (MiB) | CPU ratio | wall ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, _cli_args, call in LISTINGS:
        api_wall = statistics.median(walls[(name, "api")])
        api_cpu = statistics.median(cpus[(name, "api")])
        api_rss = peaks[(name, "api")] / 1024
        for fmt in FORMATS:
            wall = statistics.median(walls[(name, fmt)])
            cpu = statistics.median(cpus[(name, fmt)])
            print(
                f"| `{name}` | {fmt} | {wall:.2f} | {cpu:.2f} | {peaks[(name, fmt)] / 1024:.1f} "
                f"| `{call[0]}` | {api_wall:.2f} | {api_cpu:.2f} | {api_rss:.1f} "
                f"| {cpu / api_cpu:.1f}× | {wall / api_wall:.1f}× |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
