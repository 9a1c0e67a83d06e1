"""deploy/: the systemd units and the Kubernetes manifests parse, run podstore with command
lines the CLI's own parser accepts, from the documented venv, mount only what docs/deploy.md
lists (read-only where it says so), keep secrets off command lines, and carry the security
settings docs/deploy.md chooses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
from harness.deploy import (
    DEPLOY,
    KUBELET_DIR,
    POD_LOGS,
    ROOT,
    STORE_DIR,
    VENV_PODSTORE,
    containers,
    daemonset,
    manifest,
    unit,
)

from podstore import logs
from podstore.cli import cli

#: Where the DaemonSet mounts the Secret podstore-fleet, and the file --ship-to-file reads.
FLEET_DIR = "/etc/podstore/fleet"
#: What the unit and the DaemonSet keep on the node (docs/deploy.md).
KEEP_HISTORY = 30 * 86400


def paths(values: list[str]) -> list[str]:
    """A path-list setting's paths, without the '-' (ignore if missing) prefix."""
    return [p.lstrip("-") for p in " ".join(values).split()]


def parsed(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The subcommand and the parameters podstore's own parser gives ``argv`` (unknown or
    malformed options fail here)."""
    assert Path(argv[0]).name == "podstore", argv
    with cli.make_context("podstore", argv[1:]) as ctx:
        # Click keeps the subcommand apart until it runs (``protected_args``, deprecated as a
        # public name in 8.2; from 9.0 it is at the head of ``args``).
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        command = cli.get_command(ctx, rest[0])
        assert isinstance(command, click.Command), rest
        with command.make_context(rest[0], rest[1:], parent=ctx) as sub:
            return rest[0], {"db": ctx.params["db"], **sub.params}


# ---- systemd --------------------------------------------------------------------------------


def test_watch_unit() -> None:
    u = unit("podstore-watch.service")
    service = u["Service"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == VENV_PODSTORE
    command, params = parsed(argv)
    assert command == "watch"
    # The whole node: every manager's checkpoint in kubelet's directory, the pods' names.
    assert params["checkpoint"] is None
    assert str(params["kubelet_dir"]) == KUBELET_DIR and str(params["pod_logs"]) == POD_LOGS
    assert params["metrics_addr"] == ("127.0.0.1", 9465)  # loopback on a host
    assert not params["once"]
    assert str(params["db"]).startswith(STORE_DIR + "/")
    assert params["keep_history"] == KEEP_HISTORY
    # The fleet URL as a credential (a file only this service sees), never on the command
    # line; other settings from an optional root-only file.
    assert service["LoadCredential"] == ["fleet-url:/etc/podstore/fleet-url"]
    # ... and the file optional: systemd falls back to the SetCredential= of the same ID when
    # it cannot read the file (systemd.exec(5)), here a comment line, which means no fleet
    # (tests/test_deploy_units.py runs the command line with it).
    (fallback,) = service["SetCredential"]
    assert fallback.startswith("fleet-url:#")
    assert params["ship_to_file"] == "${CREDENTIALS_DIRECTORY}/fleet-url"
    assert params["ship_to"] is None and not params["ship_to_env"]
    assert service["EnvironmentFile"] == ["-/etc/podstore/podstore.env"]
    assert "postgresql" not in exec_start
    # The store directory is the only writable place; kubelet's read-only, pods' hidden.
    assert service["ProtectSystem"] == ["strict"]
    assert paths(service["ReadWritePaths"]) == [STORE_DIR]
    assert service["StateDirectory"] == ["podstore"]
    assert {KUBELET_DIR, POD_LOGS} <= set(paths(service["ReadOnlyPaths"]))
    assert paths(service["InaccessiblePaths"]) == ["/var/lib/kubelet/pods"]
    assert service["PrivateTmp"] == ["yes"] and service["NoNewPrivileges"] == ["yes"]
    # Root without capabilities, and no unix sockets (kubelet's are in the directory it reads).
    assert service["CapabilityBoundingSet"] == [""] and service["AmbientCapabilities"] == [""]
    assert service["RestrictAddressFamilies"] == ["AF_INET AF_INET6"]
    assert "User" not in service
    assert service["KillSignal"] == ["SIGTERM"] and service["Restart"] == ["always"]
    assert u["Install"]["WantedBy"] == ["multi-user.target"]


def test_ship_unit_and_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    u = unit("podstore-ship.service")
    service = u["Service"]
    assert service["Type"] == ["oneshot"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == VENV_PODSTORE
    monkeypatch.delenv("PODSTORE_FLEET_URL", raising=False)
    with pytest.raises(click.BadParameter, match="PODSTORE_FLEET_URL"):
        parsed(argv)  # the URL can only come from the environment file
    monkeypatch.setenv("PODSTORE_FLEET_URL", "postgresql://node@fleet.example/fleet")
    command, params = parsed(argv)
    assert command == "ship" and params["url"] == "postgresql://node@fleet.example/fleet"
    assert str(params["db"]).startswith(STORE_DIR + "/")
    assert u["Unit"]["ConditionPathExists"] == [str(params["db"])]
    assert service["EnvironmentFile"] == ["-/etc/podstore/podstore.env"]
    assert service["ProtectSystem"] == ["strict"]
    assert paths(service["ReadWritePaths"]) == [STORE_DIR]
    assert paths(service["InaccessiblePaths"]) == ["/var/lib/kubelet"]
    assert service["CapabilityBoundingSet"] == [""]

    timer = unit("podstore-ship.timer")
    assert timer["Timer"]["OnUnitInactiveSec"] == ["5min"]
    assert "RandomizedDelaySec" in timer["Timer"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    assert "Unit" not in timer["Timer"]  # the service of the same name


def test_environment_file_example() -> None:
    """systemd's EnvironmentFile syntax: KEY=VALUE lines and comments; the variable podstore
    reads."""
    lines = [
        line
        for line in (DEPLOY / "podstore.env.example").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    keys = [line.split("=", 1)[0] for line in lines]
    assert keys == ["PODSTORE_FLEET_URL"]
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S+", line) for line in lines)


# ---- Kubernetes -----------------------------------------------------------------------------


def source(volume: dict[str, Any]) -> str:
    """What a volume shows the container: a host path, ``Secret NAME``, or ``empty`` (a mask)."""
    if "hostPath" in volume:
        return str(volume["hostPath"]["path"])
    if "emptyDir" in volume:
        return "empty"
    return f"Secret {volume['secret']['secretName']}"


def documented_mounts() -> set[tuple[str, str, str, str]]:
    """docs/deploy.md's table of mounts: (container, host path, mount path, access)."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("<!-- mounts -->")[1].lstrip("\n")
    rows = set()
    for line in section.splitlines()[2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows.add((cells[0], cells[1], cells[2], cells[3]))
    assert rows
    return rows


def test_daemonset_mounts_only_what_the_docs_list() -> None:
    ds = daemonset()
    spec = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted = set()
    for name, c in containers().items():
        for m in c["volumeMounts"]:
            access = "read-only" if m.get("readOnly") else "read-write"
            mounted.add((name, source(volumes[m["name"]]), m["mountPath"], access))
    assert mounted == documented_mounts()
    assert all(set(v) & {"hostPath", "secret", "emptyDir"} for v in volumes.values())
    # The pods' volumes (secrets, tokens) inside the kubelet directory are masked by an empty
    # directory mounted over them.
    masks = {m["mountPath"] for m in containers()["podstore-watch"]["volumeMounts"]
             if "emptyDir" in volumes[m["name"]]}  # fmt: skip
    assert masks == {KUBELET_DIR + "/pods"}
    assert not any(
        m.get("mountPropagation") for c in containers().values() for m in c["volumeMounts"]
    )
    # Only the store is writable, and the kubelet directory is read-only.
    assert {(s, a) for _, s, _, a in mounted if a == "read-write"} == {(STORE_DIR, "read-write")}
    assert (("podstore-watch", KUBELET_DIR, KUBELET_DIR, "read-only")) in mounted
    assert (("podstore-watch", POD_LOGS, POD_LOGS, "read-only")) in mounted


def test_daemonset_command_lines() -> None:
    cs = containers()
    assert list(cs) == ["podstore-watch"]  # it ships itself: no separate shipping container
    watch = cs["podstore-watch"]
    argv = watch["command"] + watch.get("args", [])
    assert argv[0] == VENV_PODSTORE
    try:
        command, params = parsed(argv)
        assert logs.current() == "json"  # --log-format json, for the log collector
    finally:
        logs.set_format("text")
        logs.unconfigure()
    assert command == "watch"
    assert params["keep_history"] == KEEP_HISTORY
    assert params["ship_to_file"] == f"{FLEET_DIR}/url"
    assert params["ship_to"] is None and not params["ship_to_env"]
    assert params["checkpoint"] is None
    assert str(params["kubelet_dir"]) == KUBELET_DIR and str(params["pod_logs"]) == POD_LOGS
    assert str(params["db"]).startswith(STORE_DIR + "/")
    assert params["node"] == "$(NODE_NAME)"
    # The runtime's socket inside the runtime's directory, mounted read-only (a file mount
    # would keep the socket containerd replaced at its restart).
    mounts = {m["mountPath"]: m for m in watch["volumeMounts"]}
    assert str(params["cri_socket"]) == "/run/containerd/containerd.sock"
    assert mounts["/run/containerd"]["readOnly"] is True
    env = {e["name"]: e for e in watch["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    host, port = params["metrics_addr"]
    assert host == "0.0.0.0"
    assert [(p["name"], p["containerPort"]) for p in watch["ports"]] == [("metrics", port)]
    # The probes ask the health endpoints, which never read the store (GET /metrics reads
    # all of it).
    assert watch["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert watch["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_fleet_url_comes_from_the_secret() -> None:
    (secret,) = manifest("podstore-fleet-secret.yaml")
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["namespace"] == daemonset()["metadata"]["namespace"]
    spec = daemonset()["spec"]["template"]["spec"]
    watch = containers()["podstore-watch"]
    (mount,) = [m for m in watch["volumeMounts"] if m["mountPath"] == FLEET_DIR]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    ref = volume["secret"]
    assert ref["secretName"] == secret["metadata"]["name"]
    assert ref["optional"] is True  # no Secret: not shipping, not failing
    # Owner-only: podstore refuses a URL file with a password that others may read.
    assert ref["defaultMode"] == 0o400
    assert "url" in secret["stringData"]  # the file --ship-to-file names
    for c in containers().values():
        assert "postgresql://" not in " ".join(c["command"] + c.get("args", []))
        assert all("postgresql" not in str(e) for e in c.get("env", []))
        assert all("secretKeyRef" not in str(e) for e in c.get("env", []))


def test_daemonset_security() -> None:
    ds = daemonset()
    spec = ds["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), key
    images = {c["image"] for c in spec["containers"]}
    assert len(images) == 1
    for name, c in containers().items():
        sc = c["securityContext"]
        # uid 0 is the documented choice (kubelet's files are root's, mode 0600), with no
        # capability at all.
        assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False, name
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["privileged"] is False, name
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        resources = c["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}, name
        assert set(resources["limits"]) == {"cpu", "memory"}, name
    assert ds["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )
    assert spec["terminationGracePeriodSeconds"] >= 10


def test_tolerations_are_for_gpu_nodes_only() -> None:
    spec = daemonset()["spec"]["template"]["spec"]
    for t in spec["tolerations"]:
        assert t.get("key"), f"a wildcard toleration: {t}"
        assert "node-role.kubernetes.io" not in t["key"], t
        assert t["effect"] == "NoSchedule", t
    assert {t["key"] for t in spec["tolerations"]} == {"nvidia.com/gpu", "amd.com/gpu"}
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_podmonitor_scrapes_the_daemonset_as_job_podstore() -> None:
    (pm,) = manifest("podstore-podmonitor.yaml")
    assert pm["kind"] == "PodMonitor" and pm["apiVersion"] == "monitoring.coreos.com/v1"
    ds = daemonset()
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert relabel["job"]["replacement"] == "podstore"  # what the rules select
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
