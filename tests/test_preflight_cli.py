"""``podstore preflight`` as a child process on fake kubelet directories and a fake sysfs:
upgrades, a downgrade, each node check firing and silent, exit statuses, ``-o json`` columns,
and that it opens no store."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from podstore.checkpoint.memory_state import dumps_memory_state, read_memory_state
from podstore.cli.preflight import COLUMNS
from tests.harness.cli import podstore

VECTORS = Path(__file__).parent / "vectors"
NODE = VECTORS / "node"
DEVICES = "device-plugins/kubelet_internal_checkpoint"


def sysfs(tmp: Path, online: str = "0-23", nodes: tuple[int, ...] = (0,)) -> Path:
    root = tmp / "sys"
    cpu = root / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    (cpu / "online").write_text(online + "\n")
    for n in nodes:
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True, exist_ok=True)
    return root


def kubelet_dir(tmp: Path, **files: Path | str) -> Path:
    """A kubelet directory holding FILES (name → vector path or content); ``devices`` is the
    device manager's file."""
    root = tmp / "kubelet"
    (root / "device-plugins").mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        dest = root / (DEVICES if name == "devices" else name)
        if isinstance(src, Path):
            shutil.copyfile(src, dest)
        else:
            dest.write_text(src)
    return root


def static_memory() -> str:
    # The upstream fixture spells the policy "static"; kubelet's static policy is "Static".
    # Written as v1 (every release with a memory manager reads it), without podEntries.
    state = read_memory_state(NODE / "memory-v2.json")
    state = replace(state, policy_name="Static", pod_entries={}, version=1)
    return dumps_memory_state(state).decode()


def preflight(tmp: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    out = podstore("preflight", *args, "-o", "json", cwd=tmp)
    rows = json.loads(out.stdout) if out.stdout.strip() else []
    return out.returncode, rows, out.stderr


def checks(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for r in rows:
        if r["check"] is not None:
            found.setdefault(r["check"], []).append(r["status"])
    return found


def files(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["kind"]: r for r in rows if r["check"] is None}


def healthy(tmp: Path) -> Path:
    return kubelet_dir(
        tmp,
        devices=VECTORS / "real-tegra.json",
        cpu_manager_state=NODE / "cpu-real-two-containers.json",
        memory_manager_state=static_memory(),
    )


def test_upgrade_135_to_137_starts_and_checks_pass(tmp_path: Path) -> None:
    root, sys_root = healthy(tmp_path), sysfs(tmp_path)
    for release in ("1.35", "1.37"):
        code, rows, err = preflight(tmp_path, str(root), "--kubelet-version", release,
                                    "--sysfs", str(sys_root))  # fmt: skip
        assert code == 0, (rows, err)
        assert {r["kubelet_version"] for r in rows} == {release}
        assert {k: r["verdict"] for k, r in files(rows).items()} == {
            "devices": "accept",
            "cpu": "accept",
            "memory": "accept",
        }
        assert checks(rows) == {
            "no-response": ["ok"],
            "policy": ["ok", "ok"],
            "empty-default": ["ok"],
            "overlap": ["ok"],
            "cpuset-offline": ["ok"],
            "numa": ["ok"],
        }
    assert not (tmp_path / "podstore.db").exists()


def test_json_columns_on_every_row(tmp_path: Path) -> None:
    code, rows, _ = preflight(tmp_path, str(healthy(tmp_path)), "--kubelet-version", "1.37",
                              "--sysfs", str(sysfs(tmp_path)))  # fmt: skip
    assert code == 0
    assert rows and all(list(r) == list(COLUMNS) for r in rows)
    file_rows = [r for r in rows if r["check"] is None]
    assert [r["file"].split("/kubelet/")[1] for r in file_rows] == [
        DEVICES,
        "cpu_manager_state",
        "memory_manager_state",
    ]
    for r in file_rows:
        assert r["status"] == "OK" and isinstance(r["drops"], list)
        assert isinstance(r["accepted_by"], list) and r["accepted_by"]
    # Node checks come after every file row.
    first_check = next(i for i, r in enumerate(rows) if r["check"] is not None)
    assert all(r["check"] is not None for r in rows[first_check:])


def test_offline_cpu_refuses(tmp_path: Path) -> None:
    code, rows, _ = preflight(tmp_path, str(healthy(tmp_path)), "--kubelet-version", "1.37",
                              "--sysfs", str(sysfs(tmp_path, online="0-22")))  # fmt: skip
    assert code == 1
    (row,) = [r for r in rows if r["check"] == "cpuset-offline"]
    assert row["status"] == "refuse"
    assert row["detail"].startswith(
        'current set of available CPUs "0-22" doesn\'t match with CPUs in state "0-23"'
    )


def test_missing_numa_node_refuses(tmp_path: Path) -> None:
    code, rows, _ = preflight(tmp_path, str(healthy(tmp_path)), "--kubelet-version", "1.37",
                              "--sysfs", str(sysfs(tmp_path, nodes=(1,))))  # fmt: skip
    assert code == 1
    assert set(checks(rows)["numa"]) == {"refuse"}


def test_device_entry_without_decodable_response_is_a_drop(tmp_path: Path) -> None:
    root = kubelet_dir(tmp_path, devices=VECTORS / "corrupt-garbage-allocresp.json")
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.37",
                              "--sysfs", str(sysfs(tmp_path)))  # fmt: skip
    assert code == 1
    (row,) = [r for r in rows if r["check"] == "no-response"]
    assert row["status"] == "drop"
    assert row["detail"].startswith("pod 0ee33d5b-8045-49fc-ad02-56a4c413103b: 1 entries")


def test_upgrade_130_to_131_with_old_dra_file(tmp_path: Path) -> None:
    root = kubelet_dir(tmp_path, dra_manager_state=NODE / "dra-v1-classic-single.json")
    sys_root = str(sysfs(tmp_path))
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.31", "--sysfs", sys_root)
    assert code == 1
    assert files(rows)["dra"]["verdict"] == "refuse"
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.30", "--sysfs", sys_root)
    assert files(rows)["dra"]["verdict"] == "accept"
    assert code == (0 if not files(rows)["dra"]["drops"] else 1)


def test_downgrade_137_to_136_with_v4_pod_entries(tmp_path: Path) -> None:
    # Default 1-2, containers 3-6, pod-level 7-9 (only in the v4 data; the outer v2 copy lacks
    # it): every CPU online, so 1.37 with pod-level managers on starts clean; with the gate
    # off (its default) it drops podEntries (docs/kubelet-releases.md §3.3).
    root = kubelet_dir(tmp_path, cpu_manager_state=NODE / "cpu-v4-embedded-v2-pod-entries.json")
    sys_root = str(sysfs(tmp_path, online="1-9"))
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.37", "--sysfs", sys_root,
                              "--feature-gates", "PodLevelResourceManagers=true")  # fmt: skip
    assert files(rows)["cpu"]["drops"] == [] and code == 0, rows
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.37", "--sysfs", sys_root)
    assert files(rows)["cpu"]["drops"] == ["podEntries"] and code == 1, rows
    # 1.36 reads the v2 copy and loses podEntries (docs/kubelet-releases.md §3.3): a drop, and
    # CPUs 7-9 are then online but in no set of the state, which the static policy refuses.
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.36", "--sysfs", sys_root)
    cpu = files(rows)["cpu"]
    assert cpu["verdict"] == "accept" and any("podEntries" in d for d in cpu["drops"]), cpu
    (offline,) = [r for r in rows if r["check"] == "cpuset-offline"]
    assert offline["status"] == "refuse"
    assert "online but not in state: 7-9" in offline["detail"]
    assert code == 1
    # With 7-9 offline the CPU check passes; the drop alone still makes it exit 1.
    sys_root = str(sysfs(tmp_path / "small", online="1-6"))
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.36", "--sysfs", sys_root)
    assert [r["status"] for r in rows if r["check"] == "cpuset-offline"] == ["ok"]
    assert {r["status"] for r in rows if r["check"] is not None} == {"ok"}
    assert code == 1


def test_usage_errors(tmp_path: Path) -> None:
    root = str(healthy(tmp_path))
    out = podstore("preflight", root, "--kubelet-version", "1.99", cwd=tmp_path)
    assert out.returncode == 2 and "1.18" in out.stderr
    out = podstore("preflight", str(tmp_path / "nowhere"), "--kubelet-version", "1.37",
                   cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2
    out = podstore("preflight", root, cwd=tmp_path)
    assert out.returncode == 2
    assert not (tmp_path / "podstore.db").exists()


def test_opens_no_store_even_when_one_is_named(tmp_path: Path) -> None:
    db = tmp_path / "given.db"
    out = podstore("--db", str(db), "preflight", str(healthy(tmp_path)), "--kubelet-version",
                   "1.37", "--sysfs", str(sysfs(tmp_path)), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not db.exists() and not (tmp_path / "podstore.db").exists()


def test_a_refused_file_gets_no_check_rows(tmp_path: Path) -> None:
    # Memory v2 is read from 1.37 on (the release table): 1.35 refuses the file, so kubelet
    # stops before any check of its content.
    state = replace(read_memory_state(NODE / "memory-v2.json"), policy_name="Static")
    root = kubelet_dir(tmp_path, memory_manager_state=dumps_memory_state(state).decode())
    sys_root = str(sysfs(tmp_path, nodes=(1,)))
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.35", "--sysfs", sys_root)
    assert files(rows)["memory"]["verdict"] == "refuse" and code == 1
    assert checks(rows) == {}
    code, rows, _ = preflight(tmp_path, str(root), "--kubelet-version", "1.37", "--sysfs", sys_root)
    assert files(rows)["memory"]["verdict"] == "accept"
    assert set(checks(rows)["numa"]) == {"refuse"}
