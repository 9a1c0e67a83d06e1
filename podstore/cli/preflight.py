"""``podstore preflight``: what a kubelet release will do with this node's checkpoint files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podstore.cli.output import emit, output_option
from podstore.cli.release_options import release_options

if TYPE_CHECKING:
    from podstore.checkpoint.releases import Release

#: The managers' files under the kubelet directory, in the order kubelet starts the managers.
FILES = (
    "device-plugins/kubelet_internal_checkpoint",
    "cpu_manager_state",
    "memory_manager_state",
    "dra_manager_state",
)
#: File rows fill verify-checkpoint's columns and the verdict's; node-check rows fill
#: ``file kind kubelet_version check status detail`` (docs/node-files.md, "Preflight").
COLUMNS = (
    "file",
    "kind",
    "check",
    "status",
    "format",
    "entries",
    "stored",
    "computed",
    "error",
    "kubelet_version",
    "verdict",
    "read_as",
    "drops",
    "accepted_by",
    "detail",
)
# Node-check statuses that mean the release refuses to start or loses something.
_BAD_CHECKS = ("refuse", "drop")


@click.command("preflight")
@click.argument(
    "kubelet_dir",
    required=False,
    default="/var/lib/kubelet",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@release_options(required=True, help="The kubelet release to judge for.")
@click.option(
    "--sysfs",
    default="/sys",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The node's sysfs root (online CPUs, NUMA nodes).",
)
@output_option
def preflight(
    kubelet_dir: Path,
    kubelet_version: Release,
    sysfs: Path,
    feature_gates: dict[str, bool],
    output: str,
) -> None:
    """What kubelet release --kubelet-version does with the checkpoint files in KUBELET_DIR
    (default /var/lib/kubelet) when it starts: one row per file present (verify-checkpoint's
    columns and the release's verdict), then one row per node check (kubelet's start-up checks
    that the files and --sysfs can answer; a check that passes says ok).

    Read-only: opens no store and writes nothing. Exit status 0 when that release starts and
    loses nothing, 1 otherwise (the rows say why), 2 on bad usage.
    """
    failed = False

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal failed
        checks: list[dict[str, Any]] = []
        for name in FILES:
            path = kubelet_dir / name
            if not path.exists():
                continue
            row, state = _file_row(path, kubelet_version, feature_gates)
            failed |= row["status"] != "OK" or row["verdict"] != "accept" or bool(row["drops"])
            yield row
            if state is not None and row["verdict"] == "accept":
                kept = not any("podEntries" in d for d in row["drops"])
                checks += _check_rows(path, state, kubelet_version, sysfs, kept)
        for row in checks:
            failed |= row["status"] in _BAD_CHECKS
            yield row

    emit(rows(), COLUMNS, output)
    if failed:
        sys.exit(1)


def _file_row(path: Path, release: Release, gates: dict[str, bool]) -> tuple[dict[str, Any], Any]:
    """verify-checkpoint's row for ``path`` with the release's verdict (its reason also in
    ``detail``); and the checkpoint read (``None`` when unreadable)."""
    from podstore.cli.checkpoint import add_verdict, checkpoint_row

    row, cp = checkpoint_row(path)
    row["detail"] = add_verdict(row, path, release, gates).reason
    return row, cp


def _check_rows(
    path: Path, cp: Any, release: Release, sysfs: Path, pod_entries_kept: bool
) -> list[dict[str, Any]]:
    from podstore.checkpoint import startup_checks as sc

    state = cp.state
    if cp.kind == "cpu":
        found = sc.cpu_checks(state, release.minor, sysfs, pod_entries_kept=pod_entries_kept)
    elif cp.kind == "memory":
        found = sc.memory_checks(state, release.minor, sysfs)
    elif cp.kind == "devices":
        found = sc.device_checks(state)
    else:
        found = []
    return [
        {
            "file": str(path),
            "kind": c.kind,
            "kubelet_version": str(release),
            "check": c.check,
            "status": c.status,
            "detail": c.detail,
        }
        for c in found
    ]
