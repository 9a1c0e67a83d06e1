"""The deployment files the tests read: deploy/'s systemd units (parsed) and Kubernetes
manifests, and the paths they are written for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
KUBELET_DIR = "/var/lib/kubelet"
POD_LOGS = "/var/log/pods"
VENV_PODSTORE = "/opt/podstore/bin/podstore"
STORE_DIR = "/var/lib/podstore"


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


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    return parse_unit((DEPLOY / name).read_text(encoding="utf-8"))


def manifest(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def daemonset() -> dict[str, Any]:
    (ds,) = manifest("podstore-watch-daemonset.yaml")
    assert ds["kind"] == "DaemonSet" and ds["apiVersion"] == "apps/v1"
    return ds


def containers() -> dict[str, dict[str, Any]]:
    spec = daemonset()["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}
