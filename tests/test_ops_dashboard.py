"""The Grafana dashboard: valid JSON in Grafana's shape, a ``node`` variable every query
filters on, the panels the issue asks for, and every query over known metric names
(tests/harness/ops_metrics.py). test_ops_prometheus.py runs the queries against a real
Prometheus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.ops_metrics import KNOWN, metric_names

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "podstore.json"


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def targets(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


def test_shape_and_variables() -> None:
    dash = dashboard()
    assert dash["uid"] == "podstore" and dash["title"] == "podstore"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["query"]["query"] == "label_values(podstore_pods, node)"
    assert node["includeAll"] and node["multi"] and node["allValue"] == ".*"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
            assert panel["description"], panel["title"]


def test_every_query_uses_known_metrics_and_the_node_variable() -> None:
    for title, expr in targets(dashboard()):
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= KNOWN, (title, names - KNOWN)
        assert 'node=~"$node"' in expr, (title, expr)


def test_the_panels_the_issue_asks_for() -> None:
    used: dict[str, set[str]] = {}
    for title, expr in targets(dashboard()):
        used.setdefault(title, set()).update(metric_names(expr))
    everything = set().union(*used.values())
    # Allocated vs registered per resource in one panel.
    assert any(
        {"podstore_allocated_devices", "podstore_registered_devices"} <= names
        for names in used.values()
    )
    assert {
        "podstore_double_allocated_devices",
        "podstore_numa_misaligned_containers",
        "podstore_exclusive_cpus",
        "podstore_shared_cpus",
        "podstore_memory_assigned_bytes",
        "podstore_checkpoint_syncs_total",
        "podstore_sync_duration_seconds_bucket",
        "podstore_store_size_bytes",
        "podstore_ship_lag_events",
        "podstore_ship_lag_seconds",
    } <= everything
    quantiles = [e for _, e in targets(dashboard()) if "histogram_quantile" in e]
    assert {q.split(",")[0] for q in quantiles} == {
        "histogram_quantile(0.5",
        "histogram_quantile(0.9",
        "histogram_quantile(0.99",
    }


def test_metric_names_reader() -> None:
    expr = (
        "histogram_quantile(0.9, sum by (le, node) (rate(podstore_sync_duration_seconds_bucket"
        '{node=~"$node", result="a b"}[$__rate_interval]))) and on (job) up{job="x"} > 0'
    )
    assert metric_names(expr) == {"podstore_sync_duration_seconds_bucket", "up"}
    assert metric_names("time() - max by (node) (x_seconds offset 5m)") == {"x_seconds"}
