"""Tables (console and markdown), the JSON result file and the scaling plot."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from tabulate import tabulate

from bench.targets import RICH_RUN_OPTIONS, Target

PER_CALL_OPS = (
    "insert",
    "delete",
    "insert_normal",
    "container_devices",
    "pod_devices",
    "devices",
    "device_run_container_options",
    RICH_RUN_OPTIONS,
    "get_container_devices",
    "get_pod_and_container_for_device",
)
CONTENDERS = ("podstore", "lean_sqlite", "raw_sqlite", "raw_fsync", "kubelet", "memory")
HEADERS = {
    "podstore": "podstore",
    "lean_sqlite": "lean sqlite3",
    "raw_sqlite": "raw sqlite3 (same SQL)",
    "raw_fsync": "raw fsync",
    "kubelet": "kubelet-style",
    "memory": "in-memory maps",
}
BULK = {
    "podstore_import": "podstore import_checkpoint",
    "podstore_from_checkpoint_data": "podstore from_checkpoint_data",
    "raw_executemany_core": "raw sqlite3 executemany (core rows only)",
    "kubelet_load": "kubelet-style load (read+verify+maps)",
    "checksumless_load": "checksum-less load (json.loads + maps)",
}


def fmt_time(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def _times(x: float) -> str:
    return f"{x:,.0f}×" if x >= 10 else f"{x:.1f}×"


def _cell(stats: dict[str, Any] | None) -> str:
    if not stats:
        return ""
    return f"{fmt_time(stats['p50_s'])} / {fmt_time(stats['p99_s'])}"


def per_call_rows(results: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    for op in PER_CALL_OPS:
        for s in results["sizes"]:
            got = s["ops"].get(op, {})
            ps = got.get("podstore", {}).get("p50_s")
            ratios = []
            for who, label in (
                ("lean_sqlite", "lean"),
                ("raw_sqlite", "sql"),
                ("raw_fsync", "fsync"),
                ("memory", "maps"),
            ):
                base = got.get(who, {}).get("p50_s")
                if ps and base:
                    ratios.append(f"{ps / base:.2f}× {label}")
            kb = got.get("kubelet", {}).get("p50_s")
            # kubelet-style is measured in its own loop, against podstore again (runner.py).
            ps_b = got.get("podstore_kubelet_loop", {}).get("p50_s") or ps
            if ps_b and kb and op == "insert":
                ratios.append(f"kubelet-style costs {_times(kb / ps_b)}")
            kio = got.get("kubelet_io_only", {}).get("p50_s")
            if ps_b and kio and op == "insert":
                ratios.append(f"its file I/O alone {_times(kio / ps_b)}")
            small = got.get("podstore_small_store", {}).get("p50_s")
            if ps and small:
                ratios.append(f"{ps / small:.2f}× the {s.get('small_store_pods', 0):,}-pod store")
            rows.append(
                [op, f"{s['pods']:,}"]
                + [_cell(got.get(c)) for c in CONTENDERS]
                + [", ".join(ratios), str(got.get("podstore", {}).get("n", ""))]
            )
    return rows


def per_call_table(results: dict[str, Any], fmt: str) -> str:
    headers = ["operation", "pods"] + [f"{HEADERS[c]} p50 / p99" for c in CONTENDERS]
    headers += ["podstore vs", "n"]
    return tabulate(per_call_rows(results), headers=headers, tablefmt=fmt, disable_numparse=True)


def whole_state_table(results: dict[str, Any], fmt: str) -> str:
    rows: list[list[str]] = []
    for s in results["sizes"]:
        imp = s["ops"].get("import", {})
        tp = s.get("import_throughput_entries_per_s", {})
        for key, label in BULK.items():
            if key in imp:
                rows.append(
                    [
                        f"import: {label}",
                        f"{s['pods']:,}",
                        f"{s['entries']:,}",
                        fmt_time(imp[key]["p50_s"]),
                        f"{tp.get(key, 0):,.0f} entries/s",
                    ]
                )
        exp = s["ops"].get("export", {})
        for key, label in (
            ("podstore", "podstore export_checkpoint"),
            ("kubelet", "kubelet write"),
        ):
            if key in exp:
                rows.append(
                    [
                        f"export: {label}",
                        f"{s['pods']:,}",
                        f"{s['entries']:,}",
                        fmt_time(exp[key]["p50_s"]),
                        "",
                    ]
                )
        rows.extend(
            _restart_rows(
                s["ops"].get("open_to_first_answer", {}),
                s.get("import_time_s", {}),
                s.get("peak_rss_kib", {}),
                f"{s['pods']:,}",
                f"{s['entries']:,}",
            )
        )
    fx = results.get("fixture") or {}
    if fx:
        rows.extend(
            _restart_rows(
                fx.get("open_to_first_answer", {}),
                fx.get("import_time_s", {}),
                fx.get("peak_rss_kib", {}),
                "fixture",
                f"{fx['entries']:,}",
            )
        )
        at = fx.get("open_at") or {}
        if at:
            rows.extend(
                _restart_rows(
                    at.get("open_to_first_answer", {}), {}, {}, "fixture", f"{at['entries']:,}"
                )
            )
    return tabulate(
        rows,
        headers=["whole-state operation", "pods", "entries", "p50", "note"],
        tablefmt=fmt,
        disable_numparse=True,
    )


RESTARTS = {
    "podstore": "podstore open (default options) + 1 query",
    "podstore_blocking": "podstore open (verify=blocking) + 1 query",
    "kubelet": "kubelet load",
}


def _restart_rows(
    opened: dict[str, Any],
    imports: dict[str, float],
    rss: dict[str, int],
    pods: str,
    entries: str,
) -> list[list[str]]:
    """Restart and peak-memory rows of one size (or of the fixture)."""
    rows = [
        [
            f"restart: {label}",
            pods,
            entries,
            fmt_time(opened[key]["p50_s"]),
            f"+ {fmt_time(imports[key])} module imports" if key in imports else "",
        ]
        for key, label in RESTARTS.items()
        if key in opened
    ]
    for key, label in (("podstore_import", "podstore import"), ("kubelet_load", "kubelet load")):
        if rss.get(key):
            if key == "podstore_import":
                before = rss.get("podstore_before_import", 0)
                note = (
                    f"(before import: {before / 1024:.0f} MiB; "
                    f"growth {(rss[key] - before) / 1024:.0f} MiB)"
                )
            else:
                growth = rss.get("kubelet_load_growth")
                note = f"(growth {growth / 1024:.0f} MiB)" if growth is not None else ""
            rows.append([f"peak RSS: {label}", pods, entries, f"{rss[key] / 1024:.0f} MiB", note])
    return rows


def targets_table(targets: list[Target], fmt: str) -> str:
    rows = []
    for t in targets:
        value = "–" if t.measured is None else f"{t.measured:,.2f}{t.unit}"
        limit = f"{'≥' if t.higher_is_better else '≤'} {t.limit:g}{t.unit if t.unit != '×' else ''}"
        rows.append([t.name, value, limit, t.verdict, t.detail])
    return tabulate(
        rows,
        headers=["target", "measured", "limit", "verdict", "figures"],
        tablefmt=fmt,
        disable_numparse=True,
    )


def machine_lines(meta: dict[str, Any]) -> list[str]:
    m = meta["machine"]
    fs = m.get("filesystem", {})
    dev = m.get("block_device", {})
    return [
        f"- CPU: {m['cpu_model']}, {m['nproc']} cores (nproc), {m['mem_total_gib']} GiB RAM, "
        f"kernel {m['kernel']}",
        f"- bench files: {m['bench_dir']} on {fs.get('device', '?')} ({fs.get('fstype', '?')}, "
        f"mounted at {fs.get('mount_point', '?')}, {fs.get('options', '')}; "
        f"rotational={dev.get('rotational', '?')})",
        f"- Python {m['python']} ({m['python_implementation']}), SQLite {m['sqlite']}, "
        f"podstore {m['podstore']} at commit {m['git_commit']}"
        + (
            f" plus uncommitted changes to {len(m['uncommitted_changes'])} files"
            if m.get("uncommitted_changes")
            else ""
        ),
        f"- load average at start: {', '.join(f'{x:.2f}' for x in m['load_avg_at_start'])}; "
        f"at end: {', '.join(f'{x:.2f}' for x in meta.get('load_avg_at_end', []))}",
        f"- run: `{meta['command']}`, {meta['duration_s']:.0f} s, seed {meta['seed']}, "
        f"started {meta['started']}",
    ]


def markdown(results: dict[str, Any], targets: list[Target]) -> str:
    meta = results["meta"]
    parts = [
        "# podstore benchmark results",
        "",
        "Generated by `python -m bench`; see docs/performance.md for what each figure means.",
        "",
        "## Machine",
        "",
        *machine_lines(meta),
        "",
        "## Targets",
        "",
        targets_table(targets, "github"),
        "",
        "## Per call (p50 / p99)",
        "",
        per_call_table(results, "github"),
        "",
        "## Whole state",
        "",
        whole_state_table(results, "github"),
        "",
    ]
    write_rows = []
    for s in results["sizes"]:
        frames = s.get("wal_frames_per_call") or {}
        counts = s.get("statements_per_call") or {}
        cpu = s.get("cpu_per_insert_normal_s") or {}
        if frames or cpu:
            write_rows.append(
                [
                    f"{s['pods']:,}",
                    str(counts.get("insert", "")),
                    str(counts.get("delete", "")),
                    str(frames.get("insert", "")),
                    str(frames.get("delete", "")),
                    str(frames.get("lean_insert", "")),
                    fmt_time(cpu.get("podstore", {}).get("mean_s")),
                    fmt_time(cpu.get("lean_sqlite", {}).get("mean_s")),
                ]
            )
    if write_rows:
        parts += [
            "## What one write costs",
            "",
            "Statements per call (BEGIN and COMMIT included), WAL frames (pages) each commit",
            "wrote (median), and mean process CPU per insert at durability=normal.",
            "",
            tabulate(
                write_rows,
                headers=[
                    "pods",
                    "statements / insert",
                    "statements / delete",
                    "frames / insert",
                    "frames / delete",
                    "lean frames / insert",
                    "CPU / insert",
                    "lean CPU / insert",
                ],
                tablefmt="github",
                disable_numparse=True,
            ),
            "",
        ]
    parts += [
        "## Disk traffic during the insert phase",
        "",
        "What the whole disk took while the durable per-call figures of each size were measured,",
        "and how much of it came from other processes (noise the interleaving shares out).",
        "",
    ]
    io_rows = []
    for s in results["sizes"]:
        io = s.get("insert_phase_io")
        if io:
            io_rows.append(
                [
                    f"{s['pods']:,}",
                    f"{io['seconds']:.0f} s",
                    f"{io['disk_mb']:,.0f} MB",
                    f"{io['own_mb']:,.0f} MB",
                    f"{io['others_mb']:,.0f} MB",
                    f"{io['load_avg_1m']:.2f}",
                ]
            )
    parts += [
        tabulate(
            io_rows,
            headers=["pods", "phase", "disk writes", "by the bench", "by others", "load (1 min)"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
    ]
    checks = [c for s in results["sizes"] for c in s.get("checks", [])]
    checks += (results.get("fixture") or {}).get("checks", [])
    checks += ((results.get("fixture") or {}).get("open_at") or {}).get("checks", [])
    parts += ["## Answer checks", ""]
    parts += [f"- {c}" for c in checks] or [
        "- podstore, raw sqlite3 and the in-memory maps gave equal answers on every checked call."
    ]
    parts.append("")
    return "\n".join(parts)


def console(results: dict[str, Any], targets: list[Target]) -> str:
    return "\n\n".join(
        [
            per_call_table(results, "simple"),
            whole_state_table(results, "simple"),
            targets_table(targets, "simple"),
        ]
    )


def write_json(path: str, results: dict[str, Any], targets: list[Target]) -> None:
    doc = dict(results)
    doc["targets"] = [t.as_dict() for t in targets]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def plot(results: dict[str, Any], path: str) -> bool:
    """Per-call durable insert cost vs pods, log-log; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = results["sizes"]
    pods = [s["pods"] for s in sizes]
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=110)
    styles = {
        "kubelet": ("kubelet-style (maps + full checkpoint rewrite)", "tab:red", "s"),
        "kubelet_io_only": (
            "kubelet-style file I/O alone (write, fsync, rename)",
            "tab:orange",
            "D",
        ),
        "podstore": ("podstore insert (one durable transaction)", "tab:blue", "o"),
        "lean_sqlite": ("lean raw sqlite3 (same logical content)", "tab:green", "^"),
        "raw_fsync": ("raw fsync (append + fsync)", "tab:gray", "v"),
    }
    for who, (label, color, marker) in styles.items():
        xs, p50, p99 = [], [], []
        for n, s in zip(pods, sizes, strict=True):
            got = s["ops"].get("insert", {}).get(who)
            if got:
                xs.append(n)
                p50.append(got["p50_s"] * 1e6)
                p99.append(got["p99_s"] * 1e6)
        if not xs:
            continue
        ax.plot(xs, p50, marker=marker, color=color, label=f"{label}, p50")
        ax.plot(xs, p99, linestyle=":", marker=marker, color=color, alpha=0.5, markersize=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pods in the store (≈1.9 entries per pod)")
    ax.set_ylabel("per-call durable insert, µs (solid p50, dotted p99)")
    ax.set_title("Durable insert of one container's allocation vs state size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return True
