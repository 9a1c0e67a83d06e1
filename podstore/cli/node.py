"""``podstore import-node`` and ``podstore topology``: the whole node — its four checkpoints,
NUMA topology and pod names — loaded at once, and pictured per NUMA node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from podstore.checkpoint.cdi_specs import DEFAULT_CDI_DIRS
from podstore.checkpoint.podnames import DEFAULT_POD_LOGS
from podstore.checkpoint.topology import DEFAULT_SYSFS
from podstore.cli.checkpoint import KIND_NAMES, node_report_line
from podstore.cli.context import Context
from podstore.cli.output import emit, escape_controls, output_option
from podstore.types import CdiReport, ContainerNuma, NumaUsage, SyncReport

#: Where kubelet keeps its state.
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"

TOPOLOGY_COLUMNS = ["numa_node", "kind", "name", "held", "free", "total", "holders"]
MISALIGNED_COLUMNS = [
    "pod_uid",
    "namespace",
    "pod_name",
    "container",
    "device_numa",
    "cpu_numa",
    "memory_numa",
]
#: How many skipped topology or name entries the report names before it says "and N more".
SKIPPED_SHOWN = 10


def node_dirs(fn: Any) -> Any:
    """``--sysfs``, ``--pod-logs`` and ``--cdi-dir``, shared by ``import-node`` and ``watch``."""
    fn = click.option(
        "--cdi-dir",
        "cdi_dirs",
        type=click.Path(file_okay=False, path_type=Path),
        multiple=True,
        default=DEFAULT_CDI_DIRS,
        show_default=True,
        help="A directory of CDI spec files (*.json, *.yaml), whose devices' host device "
        "nodes name the physical devices; repeatable, later ones first in priority as CDI "
        "has it. One that is not there keeps what it gave before.",
    )(fn)
    fn = click.option(
        "--pod-logs",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_POD_LOGS,
        show_default=True,
        help="kubelet's pod log directory, whose NAMESPACE_NAME_UID entries name the pods.",
    )(fn)
    return click.option(
        "--sysfs",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_SYSFS,
        show_default=True,
        help="The sysfs root whose devices/system/node/node*/cpulist give CPU -> NUMA node.",
    )(fn)


def _device_line(report: SyncReport) -> str:
    return (
        f"{KIND_NAMES['devices']} from {escape_controls(report.path)} [v{report.version}]: "
        f"{report.entries} entries, {report.inserted} inserted, {report.replaced} replaced, "
        f"{report.deleted} deleted" + ("" if report.changed else " (unchanged)")
    )


@click.command("import-node")
@click.argument(
    "kubelet_dir",
    required=False,
    default=DEFAULT_KUBELET_DIR,
    type=click.Path(file_okay=False, path_type=Path),
)
@node_dirs
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse larger checkpoint files (default 256 MiB).",
)
@click.pass_obj
def import_node(
    ctx: Context,
    kubelet_dir: Path,
    sysfs: Path,
    pod_logs: Path,
    cdi_dirs: tuple[Path, ...],
    max_bytes: int | None,
) -> None:
    """Load the whole node in one transaction: every checkpoint present in KUBELET_DIR
    (default /var/lib/kubelet) — the device manager's, the CPU, memory and DRA managers' —,
    the NUMA topology (--sysfs), the pod names (--pod-logs) and the CDI specs (--cdi-dir).

    Each writes only what differs, each change a history event. Every present file is
    verified first: one that fails refuses the whole command (exit 1, nothing changed). A
    kind whose file is absent is left as it was and reported, and so are the topology and
    names when --sysfs or --pod-logs is not there, and a --cdi-dir that is not there keeps
    what it gave (a spec that is no CDI spec is skipped, on stderr); a KUBELET_DIR without
    any of the files is refused (exit 1). Exit status 0 when loaded.
    """
    report = ctx.store().import_node(
        kubelet_dir, sysfs=sysfs, pod_logs=pod_logs, cdi_dirs=cdi_dirs, max_bytes=max_bytes
    )
    for part in report.checkpoints.values():
        if isinstance(part, SyncReport):
            click.echo("imported " + _device_line(part))
        else:
            click.echo("imported " + node_report_line(part))
    for kind in report.absent:
        click.echo(f"absent: {KIND_NAMES[kind]} (left as it was)")
    sources = (
        (report.topology, "NUMA topology", f"{sysfs} is no sysfs"),
        (report.names, "pod names", f"{pod_logs} is no directory"),
    )
    for source, what, why in sources:
        if source is None:
            click.echo(f"absent: {what}: {escape_controls(why)} (left as it was)")
            continue
        click.echo("imported " + node_report_line(source, what))
        for reason in source.skipped[:SKIPPED_SHOWN]:
            click.echo(f"  skipped {escape_controls(reason)}")
        if len(source.skipped) > SKIPPED_SHOWN:
            click.echo(f"  ... and {len(source.skipped) - SKIPPED_SHOWN} more")
    if report.cdi is not None:
        cdi_line(report.cdi, defaults=tuple(map(str, cdi_dirs)) == DEFAULT_CDI_DIRS)


def cdi_line(report: CdiReport, *, defaults: bool) -> None:
    """The CDI read on stdout; every spec or device skipped on stderr, as a warning. A default
    directory that is not there is no news (a node without CDI)."""
    click.echo(
        f"imported CDI specs: {report.devices} devices, {report.written} spec files written, "
        f"{report.removed} removed" + ("" if report.changed else " (unchanged)")
    )
    for directory in () if defaults else report.absent:
        click.echo(f"absent: CDI directory {escape_controls(directory)} (left as it was)")
    for reason in report.skipped:
        click.echo(f"warning: CDI spec skipped: {escape_controls(reason)}", err=True)


def _row(value: NumaUsage | ContainerNuma, columns: list[str]) -> dict[str, Any]:
    return {c: list(v) if isinstance(v := getattr(value, c), tuple) else v for c in columns}


@click.command("topology")
@click.option(
    "--misaligned",
    is_flag=True,
    help="List the containers whose devices, CPUs and memory are not on the same NUMA nodes "
    "(v_numa_misaligned) instead.",
)
@output_option
@click.pass_obj
def topology(ctx: Context, misaligned: bool, output: str) -> None:
    """The node per NUMA node: exclusive CPUs by container and the shared pool, memory by type
    (held = reserved, free, total = allocatable, in bytes), devices by resource (held; free:
    registered devices nobody holds, on the line without a NUMA node) and DRA devices by
    driver, with their holders. A blank NUMA_NODE is what no known NUMA node holds.
    """
    store = ctx.store(readonly=True)
    if misaligned:
        emit(
            (_row(c, MISALIGNED_COLUMNS) for c in store.container_numa(misaligned=True)),
            MISALIGNED_COLUMNS,
            output,
        )
        return
    emit((_row(u, TOPOLOGY_COLUMNS) for u in store.topology()), TOPOLOGY_COLUMNS, output)
