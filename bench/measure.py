"""Timing: interleaved loops, per-call samples, percentiles.

Contenders of one operation run round-robin (the order rotating every round), so machine
noise — other processes on this 2-core box, page-cache writeback — lands on all of them alike.
Each contender has its own time budget: a slow one (kubelet-style at 100,000 pods) stops after
its budget once it has ``min_reps`` samples; the others go on to ``reps``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: An op gets the round number. If it returns a float, that is its sample (an op that times
#: only part of what it does, e.g. an insert followed by the delete that undoes it).
Op = Callable[[int], object]


@dataclass(frozen=True, slots=True)
class Stats:
    """Per-call durations, in seconds."""

    n: int
    p50: float
    p99: float
    mean: float
    min: float
    max: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "p50_s": self.p50,
            "p99_s": self.p99,
            "mean_s": self.mean,
            "min_s": self.min,
            "max_s": self.max,
        }


def percentile(sorted_samples: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted samples."""
    if not sorted_samples:
        return math.nan
    k = (len(sorted_samples) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (k - lo)


def stats(samples: list[float]) -> Stats:
    s = sorted(samples)
    return Stats(
        n=len(s),
        p50=percentile(s, 50),
        p99=percentile(s, 99),
        mean=sum(s) / len(s) if s else math.nan,
        min=s[0] if s else math.nan,
        max=s[-1] if s else math.nan,
    )


def interleaved(
    ops: Mapping[str, Op],
    reps: int,
    *,
    budget_s: float,
    min_reps: int = 3,
    max_reps: Mapping[str, int] | None = None,
) -> dict[str, list[float]]:
    """Call each op with i = 0, 1, … round-robin; returns the per-call samples of each.

    An op leaves the rotation after ``reps`` calls, after ``max_reps[name]`` calls, or once
    its own samples add up to ``budget_s`` and it has ``min_reps`` of them.
    """
    names = list(ops)
    samples: dict[str, list[float]] = {n: [] for n in names}
    spent = dict.fromkeys(names, 0.0)
    limits = {n: min(reps, (max_reps or {}).get(n, reps)) for n in names}
    clock = time.perf_counter
    for i in range(reps):
        active = [
            n
            for n in names
            if len(samples[n]) < limits[n]
            and not (spent[n] >= budget_s and len(samples[n]) >= min_reps)
        ]
        if not active:
            break
        shift = i % len(active)
        for name in active[shift:] + active[:shift]:
            op = ops[name]
            t0 = clock()
            result = op(i)
            dt = clock() - t0
            samples[name].append(result if isinstance(result, float) else dt)
            spent[name] += dt
    return samples


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
