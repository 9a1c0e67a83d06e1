"""Issue 6's targets, each a ratio of two figures from the same run (medians, p50)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

READS = (
    "container_devices",
    "pod_devices",
    "devices",
    "device_run_container_options",
    "get_container_devices",
    "get_pod_and_container_for_device",
)
RSS_LIMIT_BYTES = 500 * 1000 * 1000


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    measured: float | None
    limit: float
    higher_is_better: bool
    detail: str

    @property
    def passed(self) -> bool | None:
        if self.measured is None:
            return None
        if self.higher_is_better:
            return self.measured >= self.limit
        return self.measured <= self.limit

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "MISS", None: "n/a"}[self.passed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "limit": self.limit,
            "higher_is_better": self.higher_is_better,
            "verdict": self.verdict,
            "detail": self.detail,
        }


def _p50(size: dict[str, Any], op: str, who: str) -> float | None:
    got = size["ops"].get(op, {}).get(who)
    return None if got is None else float(got["p50_s"])


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _us(s: float | None) -> str:
    return "–" if s is None else f"{s * 1e6:.0f} µs"


def evaluate(results: dict[str, Any]) -> list[Target]:
    sizes: list[dict[str, Any]] = results["sizes"]
    by_pods = {s["pods"]: s for s in sizes}
    out: list[Target] = []

    for s in sizes:
        ps, fs = _p50(s, "insert", "podstore"), _p50(s, "insert", "raw_fsync")
        out.append(
            Target(
                f"durable insert ≤ 2.0× raw fsync @ {s['pods']:,} pods",
                _ratio(ps, fs),
                2.0,
                False,
                f"podstore {_us(ps)} vs fsync {_us(fs)}",
            )
        )

    s10k = by_pods.get(10_000)
    if s10k is not None:
        ps = _p50(s10k, "insert", "podstore_kubelet_loop") or _p50(s10k, "insert", "podstore")
        kb = _p50(s10k, "insert", "kubelet")
        kio = _p50(s10k, "insert", "kubelet_io_only")
        measured = _ratio(kb, ps)
        detail = f"kubelet-style {_us(kb)} vs podstore {_us(ps)}"
        if kio is not None:
            detail += f"; its file I/O alone {_us(kio)} = {(_ratio(kio, ps) or 0):,.0f}×"
    else:
        measured, detail = None, "10,000 pods not in --sizes"
    out.append(
        Target(
            "durable insert ≥ 50× faster than kubelet-style @ 10,000 pods",
            measured,
            50.0,
            True,
            detail,
        )
    )

    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        b = _p50(hi, "insert", "podstore")
        same_loop = _p50(hi, "insert", "podstore_small_store")
        a = _p50(lo, "insert", "podstore")
        # Disk latency on a shared machine drifts between phases of the run, so the verdict
        # uses both stores measured in one interleaved loop; the cross-phase ratio is shown.
        if same_loop is not None:
            measured = _ratio(b, same_loop)
            detail = (
                f"same loop: {_us(b)} vs {_us(same_loop)}; separate phases: {_us(b)} vs "
                f"{_us(a)} = {(_ratio(b, a) or 0):.2f}×"
            )
        else:
            measured = _ratio(b, a)
            detail = f"{_us(b)} vs {_us(a)} (separate phases)"
        out.append(
            Target(
                f"insert cost @ {hi['pods']:,} pods ≤ 1.3× @ {lo['pods']:,}",
                measured,
                1.3,
                False,
                detail,
            )
        )

    for op in READS:
        worst: tuple[float, int, float | None, float | None] | None = None
        for s in sizes:
            ps, raw = _p50(s, op, "podstore"), _p50(s, op, "raw_sqlite")
            r = _ratio(ps, raw)
            if r is not None and (worst is None or r > worst[0]):
                worst = (r, s["pods"], ps, raw)
        if worst is None:
            out.append(Target(f"{op} ≤ 2× raw sqlite3", None, 2.0, False, "not measured"))
        else:
            r, pods, ps, raw = worst
            out.append(
                Target(
                    f"{op} ≤ 2× raw sqlite3 (worst size)",
                    r,
                    2.0,
                    False,
                    f"@ {pods:,} pods: podstore {_us(ps)} vs raw {_us(raw)}",
                )
            )

    fx = results.get("fixture") or {}
    opened = fx.get("open_to_first_answer", {})
    ps_open = opened.get("podstore", {}).get("p50_s")
    kb_open = opened.get("kubelet", {}).get("p50_s")
    out.append(
        Target(
            f"open-to-first-answer ≥ 100× faster than kubelet load @ {fx.get('entries', 0):,} "
            "entries",
            _ratio(kb_open, ps_open),
            100.0,
            True,
            f"kubelet-style {kb_open and f'{kb_open:.2f} s'} vs podstore "
            f"{ps_open and f'{ps_open * 1e3:.1f} ms'} (default verify=blocking: quick_check "
            "of every page)",
        )
    )
    bg_open = opened.get("podstore_background", {}).get("p50_s")
    out.append(
        Target(
            "open-to-first-answer ≥ 100× faster than kubelet load, verify=background",
            _ratio(kb_open, bg_open),
            100.0,
            True,
            f"kubelet-style {kb_open and f'{kb_open:.2f} s'} vs podstore "
            f"{bg_open and f'{bg_open * 1e3:.1f} ms'}",
        )
    )

    for s in sizes:
        tp = s.get("import_throughput_entries_per_s", {})
        ps, raw = tp.get("podstore_import"), tp.get("raw_executemany")
        out.append(
            Target(
                f"import ≥ 0.5× raw executemany throughput @ {s['pods']:,} pods",
                _ratio(ps, raw),
                0.5,
                True,
                f"{ps and f'{ps:,.0f}'} vs {raw and f'{raw:,.0f}'} entries/s",
            )
        )

    rss = (fx.get("peak_rss_kib") or {}).get("podstore_import")
    out.append(
        Target(
            f"peak RSS importing {fx.get('entries', 0):,} entries < 500 MB",
            None if rss is None else rss * 1024 / 1e6,
            RSS_LIMIT_BYTES / 1e6,
            False,
            "MB = 10^6 bytes; VmHWM of a fresh process: PodStore.open + import_checkpoint",
        )
    )
    return out
