"""The release (and gates) that writes each checkpoint format: ``podstore export`` reaches a
format only through them (docs/kubelet-release-table.md)."""

from __future__ import annotations

WRITER = {
    ("devices", "v1"): ("1.19",),
    ("devices", "v2"): ("1.20",),
    ("cpu", "v2"): ("1.35",),
    ("cpu", "v3"): ("1.36", "--feature-gates", "PodLevelResourceManagers=true"),
    ("cpu", "v4"): ("1.37",),
    ("memory", "v1"): ("1.35",),
    ("memory", "v2"): ("1.36", "--feature-gates", "PodLevelResourceManagers=true"),
    ("memory", "v3"): ("1.37",),
    ("dra", "v1"): ("1.31",),
    ("dra", "data"): ("1.32",),
}


def as_release(kind: str, fmt: str) -> tuple[str, ...]:
    """The export options that write ``fmt`` for ``kind``."""
    return ("--kubelet-version", *WRITER[kind, fmt])
