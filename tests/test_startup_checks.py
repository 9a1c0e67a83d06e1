"""Kubelet start-up checks over real vector files and a fake sysfs (docs/kubelet-releases.md §6)."""

from __future__ import annotations

import json
from pathlib import Path

from podstore.checkpoint.cpu_state import read_cpu_state
from podstore.checkpoint.decode import load
from podstore.checkpoint.memory_state import read_memory_state
from podstore.checkpoint.startup_checks import (
    NodeCheck,
    cpu_checks,
    device_checks,
    memory_checks,
)

VECTORS = Path(__file__).parent / "vectors"
NODE = VECTORS / "node"


def sysfs(tmp: Path, online: str | None = "0-23", nodes: tuple[int, ...] = (0,)) -> Path:
    root = tmp / "sys"
    cpu = root / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    if online is not None:
        (cpu / "online").write_text(online + "\n")
    for n in nodes:
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
    return root


def by_check(rows: list[NodeCheck]) -> dict[str, list[NodeCheck]]:
    out: dict[str, list[NodeCheck]] = {}
    for r in rows:
        out.setdefault(r.check, []).append(r)
    return out


def cpu_file(tmp: Path, doc: dict[str, object]) -> Path:
    # A checksum of 0 is accepted by the reader (kubelet's v1-era rule), so hand edits load.
    p = tmp / "cpu_manager_state"
    p.write_text(json.dumps({**doc, "checksum": 0}))
    return p


def test_cpu_all_pass_on_matching_sysfs(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-real-two-containers.json")
    rows = cpu_checks(state, 31, sysfs(tmp_path, "0-23"))
    assert {r.check: r.status for r in rows} == {
        "policy": "ok",
        "empty-default": "ok",
        "overlap": "ok",
        "cpuset-offline": "ok",
    }


def test_cpu_offline_cpu_named_by_state(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-real-two-containers.json")
    (row,) = by_check(cpu_checks(state, 31, sysfs(tmp_path, "0-22")))["cpuset-offline"]
    assert row.status == "refuse"
    assert row.detail.startswith(
        'current set of available CPUs "0-22" doesn\'t match with CPUs in state "0-23"'
    )
    assert "not online: 23" in row.detail
    assert "online but not in state" not in row.detail


def test_cpu_online_cpu_missing_from_state(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-real-two-containers.json")
    (row,) = by_check(cpu_checks(state, 31, sysfs(tmp_path, "0-25")))["cpuset-offline"]
    assert row.status == "refuse"
    assert "online but not in state: 24-25" in row.detail
    assert "not online:" not in row.detail.replace("but not in", "")


def test_cpu_no_sysfs_is_a_warning(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-real-two-containers.json")
    (row,) = by_check(cpu_checks(state, 31, sysfs(tmp_path, None)))["cpuset-offline"]
    assert row.status == "warn"
    assert row.detail.startswith("not checked: cannot read")


def test_cpu_overlap(tmp_path: Path) -> None:
    doc = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {"p": {"c": "3-4"}}}
    state = read_cpu_state(cpu_file(tmp_path, doc))
    rows = by_check(cpu_checks(state, 31, sysfs(tmp_path, "0-4")))
    (row,) = rows["overlap"]
    assert row.status == "refuse"
    assert row.detail == 'pod: p, container: c cpuset: "3-4" overlaps with default cpuset "0-3"'
    assert rows["cpuset-offline"][0].status == "ok"


def test_cpu_empty_default_with_assignments(tmp_path: Path) -> None:
    doc = {"policyName": "static", "defaultCpuSet": "", "entries": {"p": {"c": "1"}}}
    rows = by_check(cpu_checks(read_cpu_state(cpu_file(tmp_path, doc)), 31, sysfs(tmp_path)))
    assert [(r.status, r.detail) for r in rows["empty-default"]] == [
        ("refuse", "default cpuset cannot be empty")
    ]


def test_cpu_empty_default_alone_is_initialised(tmp_path: Path) -> None:
    doc = {"policyName": "static", "defaultCpuSet": ""}
    rows = by_check(cpu_checks(read_cpu_state(cpu_file(tmp_path, doc)), 31, sysfs(tmp_path)))
    assert rows["empty-default"][0].status == "ok"
    assert "cpuset-offline" not in rows


def test_cpu_unknown_policy(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-v2-policy-other.json")
    rows = cpu_checks(state, 31, sysfs(tmp_path))
    assert [r.status for r in rows] == ["refuse"]
    assert rows[0].check == "policy"
    assert rows[0].detail.startswith(f'unknown policy: "{state.policy_name}"')


def test_cpu_none_policy_does_not_refuse_offline(tmp_path: Path) -> None:
    doc = {"policyName": "none", "defaultCpuSet": "0-7"}
    rows = by_check(cpu_checks(read_cpu_state(cpu_file(tmp_path, doc)), 31, sysfs(tmp_path, "0-3")))
    assert rows["cpuset-offline"][0].status == "warn"
    assert "not online: 4-7" in rows["cpuset-offline"][0].detail


def test_cpu_pod_entries_counted_from_136(tmp_path: Path) -> None:
    state = read_cpu_state(NODE / "cpu-v3-pod-entries.json")
    assert state.pod_entries
    named = state.default_cpu_set.union(
        *(c for cs in state.entries.values() for c in cs.values()), *state.pod_entries.values()
    )
    without = state.default_cpu_set.union(
        *(c for cs in state.entries.values() for c in cs.values())
    )
    if named == without:
        return  # the vector's pod sets add no CPU; nothing to tell apart
    from podstore.checkpoint.cpuset import format_cpuset

    root = sysfs(tmp_path, format_cpuset(named))
    assert by_check(cpu_checks(state, 36, root))["cpuset-offline"][0].status == "ok"
    assert by_check(cpu_checks(state, 35, root))["cpuset-offline"][0].status == "refuse"


def memory_file(tmp: Path, **changes: object) -> Path:
    # The upstream fixture spells the policy "static"; kubelet's static policy is "Static".
    data = {**json.loads((NODE / "memory-v2.json").read_text()), "policyName": "Static"}
    data.update(changes, checksum=0)
    p = tmp / "memory_manager_state"
    p.write_text(json.dumps(data))
    return p


def test_memory_lowercase_policy_is_refused(tmp_path: Path) -> None:
    state = read_memory_state(NODE / "memory-v2.json")
    assert [(r.check, r.status) for r in memory_checks(state, 32, sysfs(tmp_path))] == [
        ("policy", "refuse")
    ]


def test_memory_pass_and_numa_missing(tmp_path: Path) -> None:
    state = read_memory_state(memory_file(tmp_path))
    ok = memory_checks(state, 32, sysfs(tmp_path / "a", nodes=(0,)))
    assert {r.check: r.status for r in ok} == {"policy": "ok", "numa": "ok"}
    bad = by_check(memory_checks(state, 32, sysfs(tmp_path / "b", nodes=(1,))))["numa"]
    assert {r.status for r in bad} == {"refuse"}
    assert any(
        "(pod: pod, container: container1) the memory assignment uses the NUMA that does not exist"
        in r.detail
        for r in bad
    )
    assert any("machine state names NUMA [0]" in r.detail for r in bad)


def test_memory_policy_per_release(tmp_path: Path) -> None:
    root = sysfs(tmp_path)
    data = json.loads((NODE / "memory-real-none.json").read_text())
    data["policyName"] = "BestEffort"
    data["checksum"] = 0
    p = tmp_path / "memory_manager_state"
    p.write_text(json.dumps(data))
    state = read_memory_state(p)
    assert memory_checks(state, 31, root)[0].status == "refuse"
    assert memory_checks(state, 32, root)[0].status == "ok"
    assert memory_checks(state, 20, root) == []


def test_memory_empty_machine_state(tmp_path: Path) -> None:
    p = memory_file(tmp_path, machineState={})
    rows = by_check(memory_checks(read_memory_state(p), 32, sysfs(tmp_path)))
    assert rows["empty-machine-state"][0].status == "refuse"


def test_device_no_response_per_pod() -> None:
    bad = device_checks(load((VECTORS / "corrupt-garbage-allocresp.json").read_text()))
    assert [(r.check, r.status) for r in bad] == [("no-response", "drop")]
    assert bad[0].detail.startswith("pod 0ee33d5b-8045-49fc-ad02-56a4c413103b: 1 entries skipped")
    good = device_checks(load((VECTORS / "real-tegra.json").read_text()))
    assert [r.status for r in good] == ["ok"]
