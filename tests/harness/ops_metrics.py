"""The metric names the deploy files may use — the one list the rules, dashboard and
end-to-end tests check against — and a reader of the metric names in a PromQL expression.

``EXISTING``: what ``podstore watch --metrics-addr`` serves today (the contract of
docs/watch.md; the ``podstore_ship_*`` names when it ships), plus Prometheus's own ``up``.
``PENDING``: names promised by the contracts that no command serves yet (none today). The
end-to-end test fails when a pending name starts being served, so that it moves to
``EXISTING`` and its panels get checked for data: the pending list only shrinks.
"""

from __future__ import annotations

import re

#: Served today by ``podstore watch`` (histograms by their series names).
EXISTING = frozenset(
    {
        "podstore_pods",
        "podstore_allocations",
        "podstore_allocated_devices",
        "podstore_registered_devices",
        "podstore_double_allocated_devices",
        "podstore_run_option_conflicts",
        "podstore_history_events",
        "podstore_store_size_bytes",
        "podstore_checkpoint_syncs_total",
        "podstore_checkpoint_last_sync_timestamp_seconds",
        "podstore_checkpoint_last_failed_sync_timestamp_seconds",
        "podstore_sync_duration_seconds_bucket",
        "podstore_sync_duration_seconds_count",
        "podstore_sync_duration_seconds_sum",
        # node-state.md: served by watch (and `podstore metrics`) since the whole node is kept.
        "podstore_exclusive_cpus",
        "podstore_shared_cpus",
        "podstore_memory_assigned_bytes",
        "podstore_dra_allocated_devices",
        "podstore_numa_misaligned_containers",
        # physical-devices.md: cross-mechanism double allocations.
        "podstore_physical_double_allocations",
        # watch --ship-to…: the shipper's calls and the lag behind the node.
        "podstore_ship_successes_total",
        "podstore_ship_failures_total",
        "podstore_ship_refusals_total",
        "podstore_ship_last_success_timestamp_seconds",
        "podstore_ship_last_seq",
        "podstore_ship_lag_events",
        "podstore_ship_lag_seconds",
        # watch --kubelet-version: what that release would do with each followed file.
        "podstore_kubelet_release_refused",
        "podstore_kubelet_release_drops",
        # Prometheus's own per-target series.
        "up",
    }
)

#: Promised, not served yet (none today: every contract name is served).
PENDING: frozenset[str] = frozenset()

KNOWN = EXISTING | PENDING

# PromQL words that are not metric names: keywords, aggregation modifiers, set operators.
_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Every metric name ``expr`` selects (functions, keywords, label names and the label lists
    of by/on clauses are left out)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _RANGES.sub("", text)
    # Label lists: by (...), without (...), on (...), ignoring (...), group_x (...).
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for name, call in _IDENT.findall(text):
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names
