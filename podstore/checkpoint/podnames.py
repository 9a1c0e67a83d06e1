"""Pod names, read from kubelet's pod log directories ``/var/log/pods/NAMESPACE_NAME_UID``
(``BuildPodLogsDirectory``): a namespace is a DNS label and a name a DNS subdomain, so neither
holds ``_`` and the three parts split without doubt.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: Where kubelet writes pod logs.
DEFAULT_POD_LOGS = "/var/log/pods"
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAMESPACE = re.compile(_LABEL)
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_UID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9]{0,127}")


@dataclass(frozen=True)
class PodName:
    namespace: str
    name: str


@dataclass(frozen=True)
class PodNames:
    """Pod UID → namespace and name; ``skipped`` names the entries ignored and why."""

    pods: dict[str, PodName]
    skipped: tuple[str, ...] = ()


def parse_pod_log_dir(name: str) -> tuple[str, PodName] | None:
    """``(uid, PodName)`` of a directory name ``NAMESPACE_NAME_UID`` (``None``: not one)."""
    parts = name.split("_")
    if len(parts) != 3:
        return None
    namespace, pod, uid = parts
    if (
        _NAMESPACE.fullmatch(namespace) is None
        or len(pod) > 253
        or _NAME.fullmatch(pod) is None
        or _UID.fullmatch(uid) is None
    ):
        return None
    return uid, PodName(namespace, pod)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def read_pod_names(pod_logs: str | os.PathLike[str] = DEFAULT_POD_LOGS) -> PodNames:
    """The pods named by the directories in ``pod_logs`` (empty when it does not exist or
    cannot be read). Never raises for the content of the directory."""
    try:
        with os.scandir(os.fspath(pod_logs)) as it:
            entries = sorted((e.name, _is_dir(e)) for e in it)
    except OSError:
        return PodNames({})
    pods: dict[str, PodName] = {}
    skipped: list[str] = []
    for name, is_dir in entries:
        shown = name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        if not is_dir:
            skipped.append(f"{shown}: not a directory")
            continue
        parsed = parse_pod_log_dir(name)
        if parsed is None:
            skipped.append(f"{shown}: not NAMESPACE_NAME_UID")
            continue
        uid, pod = parsed
        if uid in pods:
            skipped.append(f"{shown}: UID already named by {pods[uid].namespace}_{pods[uid].name}")
            continue
        pods[uid] = pod
    return PodNames(pods, tuple(skipped))
