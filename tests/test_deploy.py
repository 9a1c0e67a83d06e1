"""deploy/: the systemd unit and the DaemonSet parse, run ``podstore watch`` with a command line
the CLI accepts, mount the kubelet device-plugins directory read-only and keep the store on the
node."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
import yaml

from podstore.cli import cli
from podstore.watch.follower import DEFAULT_CHECKPOINT

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
KUBELET_DIR = "/var/lib/kubelet/device-plugins"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit: section → key → values (a key may repeat; '\\' continues a line)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def parsed_watch(argv: list[str]) -> dict[str, Any]:
    """The parameters ``podstore watch`` gets from ``argv`` (the CLI's own parser: unknown or
    malformed options fail here)."""
    assert Path(argv[0]).name == "podstore", argv
    with cli.make_context("podstore", argv[1:]) as ctx:
        # Click keeps the subcommand apart until it runs (``protected_args``, deprecated as a
        # public name in 8.2; from 9.0 it is at the head of ``args``).
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        assert rest[0] == "watch", argv
        command = cli.get_command(ctx, "watch")
        assert isinstance(command, click.Command)
        with command.make_context("watch", rest[1:], parent=ctx) as sub:
            return {"db": ctx.params["db"], **sub.params}


def test_systemd_unit() -> None:
    unit = parse_unit((DEPLOY / "podstore-watch.service").read_text(encoding="utf-8"))
    service = unit["Service"]
    (exec_start,) = service["ExecStart"]
    params = parsed_watch(shlex.split(exec_start))
    assert str(params["checkpoint"]) == DEFAULT_CHECKPOINT
    assert params["metrics_addr"] == ("127.0.0.1", 9465)  # loopback on a host
    assert not params["once"]
    # The kubelet directory is read-only to the service; the store directory is its only
    # writable place, and the store lives there.
    assert service["ProtectSystem"] == ["strict"]
    assert KUBELET_DIR in " ".join(service["ReadOnlyPaths"]).split()
    writable = " ".join(service.get("ReadWritePaths", [])).split()
    assert writable == ["/var/lib/podstore"]
    assert KUBELET_DIR not in writable
    assert str(params["db"]).startswith("/var/lib/podstore/")
    assert service["StateDirectory"] == ["podstore"]
    assert service["KillSignal"] == ["SIGTERM"] and service["Restart"] == ["always"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_daemonset() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "podstore-watch-daemonset.yaml").read_text()))
    (ds,) = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )
    (container,) = spec["containers"]
    params = parsed_watch(container["command"] + container.get("args", []))
    assert str(params["checkpoint"]) == DEFAULT_CHECKPOINT
    assert params["node"] == "$(NODE_NAME)"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    port = params["metrics_addr"][1]
    assert port in [p["containerPort"] for p in container["ports"]]

    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    kubelet = mounts[KUBELET_DIR]
    assert kubelet["readOnly"] is True
    assert volumes[kubelet["name"]]["hostPath"]["path"] == KUBELET_DIR
    # The store is on the node (survives the pod), in a mount that is writable.
    (store_mount,) = [
        m for path, m in mounts.items() if str(params["db"]).startswith(path.rstrip("/") + "/")
    ]
    assert not store_mount.get("readOnly", False)
    assert volumes[store_mount["name"]]["hostPath"]["path"] == "/var/lib/podstore"
    # Every other mount is read-only, and nothing else is writable in the container.
    assert all(m.get("readOnly") for m in mounts.values() if m is not store_mount)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert spec["terminationGracePeriodSeconds"] >= 10
