"""The alerting rules: ``promtool check rules`` accepts them, ``promtool test rules`` runs
their unit tests (input series for every alert: fires when it should, silent when it should
not), the PrometheusRule manifest holds the same groups, and every alert names its node and
the next command to run, over metric names the project serves or has promised.

Never skipped: without promtool the test fails and says how to get it (.ci/run installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.ops_metrics import KNOWN, metric_names
from harness.promserver import BinaryUnavailable, find

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "podstore-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "podstore-rules.test.yaml"
OPERATOR = DEPLOY / "podstore-prometheusrule.yaml"

# What the issue asks the rules to watch, by alert.
REQUIRED = {
    "PodstoreDoubleAllocatedDevices",
    "PodstorePhysicalDoubleAllocation",
    "PodstoreSyncsFailing",
    "PodstoreCheckpointStale",
    "PodstoreFollowerDown",
    "PodstoreFollowerAbsent",
    "PodstoreStoreLarge",
    "PodstoreNumaMisaligned",
    "PodstoreShipFailing",
    "PodstoreShipLagging",
}
NODE = "{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}"
COMMAND = re.compile(r"`(podstore|journalctl|kubectl|systemctl|fuser) [^`]+`")


def promtool() -> str:
    try:
        return find("promtool")
    except BinaryUnavailable as exc:
        pytest.fail(str(exc))


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_promtool_check_rules() -> None:
    run = run_promtool("check", "rules", str(RULES), cwd=RULES.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules())} rules found" in run.stdout


def test_promtool_test_rules_cover_every_alert() -> None:
    run = run_promtool("test", "rules", str(RULE_TESTS), cwd=RULE_TESTS.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
    # Every alert is tested firing (a case with expected alerts) and silent (a case at a
    # time or on series where it must not fire).
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert doc["rule_files"] == [RULES.name]
    fires, silent = set(), set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {r["alert"] for r in rules()}
    assert fires == alerts
    assert silent == alerts


def test_a_broken_rule_fails_its_unit_tests(tmp_path: Path) -> None:
    # The unit tests have teeth: the same tests against rules whose double-allocation
    # threshold is off by one fail.
    broken = RULES.read_text().replace(
        "expr: podstore_double_allocated_devices > 0", "expr: podstore_double_allocated_devices > 1"
    )
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    run = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert run.returncode != 0
    assert "PodstoreDoubleAllocatedDevices" in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # Without "after a good sync": a node that never synced fires too.
        (
            "\n          and on (job, instance, checkpoint) "
            "(podstore_checkpoint_last_sync_timestamp_seconds > 0)",
            "",
        ),
        # The comparison turned round: recovered and idle nodes fire, stale ones do not.
        (
            "> on (job, instance, checkpoint) podstore_checkpoint_last_sync",
            "< on (job, instance, checkpoint) podstore_checkpoint_last_sync",
        ),
        # Sooner than 15 minutes.
        (
            "podstore_checkpoint_last_sync_timestamp_seconds > 0)\n        for: 15m",
            "podstore_checkpoint_last_sync_timestamp_seconds > 0)\n        for: 5m",
        ),
    ],
)
def test_a_broken_stale_rule_fails_its_unit_tests(tmp_path: Path, old: str, new: str) -> None:
    text = RULES.read_text()
    assert text.count(old) == 1, old
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    run = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert run.returncode != 0, run.stdout
    assert "PodstoreCheckpointStale" in run.stdout + run.stderr


def test_the_prometheusrule_manifest_holds_the_same_rules() -> None:
    plain = yaml.safe_load(RULES.read_text())
    manifest = yaml.safe_load(OPERATOR.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["spec"]["groups"] == plain["groups"]


def test_every_alert_names_its_node_and_the_next_command() -> None:
    names = set()
    for rule in rules():
        alert = rule["alert"]
        names.add(alert)
        assert rule["labels"]["severity"] in ("critical", "warning"), alert
        summary = rule["annotations"]["summary"]
        description = rule["annotations"]["description"]
        if alert != "PodstoreFollowerAbsent":  # no target, hence no node, by definition
            assert NODE in summary, alert
        assert COMMAND.search(description), alert
        assert metric_names(rule["expr"]) <= KNOWN, (alert, metric_names(rule["expr"]) - KNOWN)
    assert names >= REQUIRED
    assert len(names) == len(rules())


@pytest.mark.parametrize(
    ("old", "new", "alert"),
    [
        # A threshold no 0/1 gauge crosses: never fires.
        (
            "expr: podstore_kubelet_release_refused > 0",
            "expr: podstore_kubelet_release_refused > 1",
            "PodstoreKubeletReleaseRefuses",
        ),
        # Sooner than 10 minutes: the mended refusal fires too.
        (
            "expr: podstore_kubelet_release_refused > 0\n        for: 10m",
            "expr: podstore_kubelet_release_refused > 0\n        for: 2m",
            "PodstoreKubeletReleaseRefuses",
        ),
        (
            "expr: podstore_kubelet_release_drops > 0",
            "expr: podstore_kubelet_release_drops >= 0",
            "PodstoreKubeletReleaseDrops",
        ),
    ],
)
def test_a_broken_release_rule_fails_its_unit_tests(
    tmp_path: Path, old: str, new: str, alert: str
) -> None:
    text = RULES.read_text()
    assert text.count(old) == 1, old
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    run = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert run.returncode != 0, run.stdout
    assert alert in run.stdout + run.stderr
