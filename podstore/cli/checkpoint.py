"""``podstore import``, ``export`` and ``verify-checkpoint``: kubelet checkpoint files of every
kind (the device manager's, and the CPU, memory and DRA managers')."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, escape_controls, output_option
from podstore.cli.progress import progress
from podstore.cli.release_options import release_options
from podstore.errors import (
    CheckpointCorruptError,
    CheckpointError,
    ExportRefusedError,
    ImportRefusedError,
    InvalidInputError,
)
from podstore.types import NodeSyncReport, SkippedEntry

if TYPE_CHECKING:
    from podstore.checkpoint.kinds import NodeCheckpoint
    from podstore.checkpoint.releases import Release

#: How many skipped entries the import report names one by one before it says "and N more".
SKIPPED_SHOWN = 20

KIND_CHOICES = ("auto", "devices", "cpu", "memory", "dra")
#: What each kind's file is, for one-line reports.
KIND_NAMES = {
    "devices": "device manager checkpoint",
    "cpu": "CPU manager state",
    "memory": "memory manager state",
    "dra": "DRA manager state",
}


def node_report_line(report: NodeSyncReport, what: str | None = None) -> str:
    """One line saying what a sync of a CPU, memory or DRA checkpoint (or of ``what``: the
    topology, the names) changed."""
    what = what or KIND_NAMES.get(report.kind, report.kind)
    version = "" if report.version is None else f" [{report.version}]"
    return (
        f"{what} from {escape_controls(str(report.path))}{version}: "
        f"{report.items} items, {report.written} written, {report.deleted} deleted"
        + ("" if report.changed else " (unchanged)")
    )


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(KIND_CHOICES),
    default="auto",
    show_default=True,
    help="The checkpoint's kind; auto: told by its content.",
)
@click.option("--merge", is_flag=True, help="Insert the file's entries over the existing ones.")
@click.option("--strict", is_flag=True, help="Refuse the file if any entry would be skipped.")
@click.option(
    "--allow-skipped",
    is_flag=True,
    help="Replace the store's entries even when every entry of the file was skipped.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse larger files (default 256 MiB).",
)
@click.pass_obj
def import_(
    ctx: Context,
    file: Path,
    kind: str,
    merge: bool,
    strict: bool,
    allow_skipped: bool,
    max_bytes: int | None,
) -> None:
    """Load a kubelet checkpoint FILE into the store, all or nothing, in one transaction.

    Any kind: the device manager's kubelet_internal_checkpoint, or the CPU, memory or DRA
    manager's state (--kind auto tells them by content). A CPU, memory or DRA file replaces
    that manager's state, writing only what differs, each change a history event.

    Device checkpoints: entries whose AllocResp does not decode are skipped, as kubelet skips
    them; the report (stdout) says how many and why. Without --merge the file replaces the
    store's entries, but if every entry of the file was skipped and the store holds entries,
    the import is refused (exit 1, nothing changed) unless --allow-skipped. --strict refuses
    a file with any skipped entry (--merge, --strict and --allow-skipped are for device
    checkpoints only). Exit status 0 when imported (skips included), 1 when refused or the
    file is unreadable, corrupt, of another kind than --kind or too large.
    """
    node_kind = kind
    if kind == "auto":
        from podstore.checkpoint import detect_kind

        kind = detect_kind(file, **({} if max_bytes is None else {"max_bytes": max_bytes}))
    store = ctx.store()
    if kind != "devices":
        if merge or strict or allow_skipped:
            raise click.UsageError(
                f"--merge, --strict and --allow-skipped are for device checkpoints, and "
                f"{file} is a {KIND_NAMES[kind]}"
            )
        # auto again: a file holding nothing but a policy name fits CPU and memory alike.
        node = store.import_node_checkpoint(file, kind=node_kind, max_bytes=max_bytes)
        click.echo("imported " + node_report_line(node))
        return
    try:
        with progress("decoding entries") as bar:
            report = store.import_checkpoint(
                file,
                merge=merge,
                strict=strict,
                max_bytes=max_bytes,
                progress=bar,
                allow_all_skipped=allow_skipped,
            )
    except ImportRefusedError as exc:
        raise ImportRefusedError(
            f"{exc}; --allow-skipped imports it anyway, --merge keeps the existing entries",
            skipped=exc.skipped,
            existing=exc.existing,
        ) from None
    click.echo(
        f"imported {report.imported} of {report.entries} entries ({report.pods} pods, "
        f"{report.registered_resources} registered resources) from {file} "
        f"[v{report.version}, checksum {report.checksum}"
        + (f", boot id {report.boot_id}" if report.boot_id else "")
        + ("; merged" if report.merged else "")
        + "]"
    )
    _list_skipped(
        report.skipped, "skipped", "whose AllocResp does not decode (kubelet skips them too)"
    )


def _list_skipped(skipped: tuple[SkippedEntry, ...], verb: str, why: str) -> None:
    """Say how many entries an import skipped or an export left out, and name the first."""
    if not skipped:
        return
    click.echo(f"{verb} {len(skipped)} {'entry' if len(skipped) == 1 else 'entries'} {why}:")
    for s in skipped[:SKIPPED_SHOWN]:
        click.echo(
            f"  {verb} entry {s.index} ({escape_controls(s.pod_uid)}/"
            f"{escape_controls(s.container_name)}/{escape_controls(s.resource_name)}): "
            f"{escape_controls(s.reason)}"
        )
    if len(skipped) > SKIPPED_SHOWN:
        click.echo(f"  ... and {len(skipped) - SKIPPED_SHOWN} more")


@click.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(KIND_CHOICES[1:]),
    default="devices",
    show_default=True,
    help="Which manager's checkpoint to write.",
)
@click.option(
    "--boot-id",
    default=None,
    help="Write this top-level BootID instead of the one import kept ('': none).",
)
@release_options(
    required=False,
    help="Write the newest format kubelet V reads, as V writes it (1.18..newest, 'newest').",
)
@click.option(
    "--allow-loss",
    is_flag=True,
    help="With --kubelet-version: write even what loses state, and list what was dropped.",
)
@click.pass_obj
def export(
    ctx: Context,
    file: Path,
    kind: str,
    boot_id: str | None,
    kubelet_version: Release | None,
    feature_gates: dict[str, bool],
    allow_loss: bool,
) -> None:
    """Write the store as the kubelet checkpoint FILE of --kind (atomic, mode 0600): exactly
    the bytes kubelet writes for that state, in the format the loaded file was written in.
    Device entries without an allocation response are left out, as kubelet leaves them out;
    the command says how many, and names the first. A device checkpoint's BootID (unmerged
    kubelet PR #137919) is written as the imported file had it; --boot-id gives another:
    pass the target boot's /proc/sys/kernel/random/boot_id when the file is for a node that
    rebooted since, or '' for none.

    Reads the store read-only: write access to the store is not needed, only to FILE's
    directory.
    """
    for given, name in ((allow_loss, "--allow-loss"), (feature_gates, "--feature-gates")):
        if given and kubelet_version is None:
            raise click.UsageError(f"{name} needs --kubelet-version")
    if kubelet_version is not None:
        from podstore.checkpoint.releases import written_format

        try:
            fmt = written_format(kind, kubelet_version, feature_gates)
        except InvalidInputError as exc:
            raise click.UsageError(str(exc)) from None
        store = ctx.store(readonly=True)
        _export_as(
            store,
            file,
            kind,
            fmt,
            boot_id=boot_id,
            allow_loss=allow_loss,
            release=str(kubelet_version),
        )
        return
    store = ctx.store(readonly=True)
    if kind != "devices":
        if boot_id is not None:
            raise click.UsageError("--boot-id is for device checkpoints")
        count = store.export_node_checkpoint(file, kind)
        click.echo(f"exported {count} entries of the {KIND_NAMES[kind]} to {file}")
        return
    with progress("reading entries") as bar:
        report = store.export_checkpoint(file, boot_id=boot_id, progress=bar)
    click.echo(f"exported {report.entries} entries to {file}")
    _list_skipped(
        report.left_out,
        "left out",
        "without an allocation response (kubelet writes only entries with one)",
    )


def _export_as(
    store: Any,
    file: Path,
    kind: str,
    fmt: str,
    *,
    boot_id: str | None,
    allow_loss: bool,
    release: str | None = None,
) -> None:
    """``export`` in the format ``fmt`` (the one ``release`` writes, when given)."""
    if boot_id is not None and kind != "devices":
        raise click.UsageError("--boot-id is for device checkpoints")
    target = f"format {fmt}" + ("" if release is None else f", as kubelet {release} writes it")
    try:
        with progress("reading entries") as bar:
            report = store.export_as(
                file, kind, fmt, allow_loss=allow_loss, boot_id=boot_id, progress=bar
            )
    except ExportRefusedError as exc:
        raise ExportRefusedError(
            f"{exc}; --allow-loss writes it anyway and lists what was dropped",
            drops=exc.drops,
        ) from None
    what = "" if kind == "devices" else f" of the {KIND_NAMES[kind]}"
    click.echo(f"exported {report.entries} entries{what} to {file} [{target}]")
    for drop in report.dropped:
        click.echo(f"  dropped: {escape_controls(drop)}")
    _list_skipped(
        report.left_out,
        "left out",
        "without an allocation response (kubelet writes only entries with one)",
    )


@click.command("verify-checkpoint")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@release_options(
    required=False,
    help="Judge each file for kubelet V (1.18..newest, 'newest', 'any'; default any) in the "
    "columns kubelet_version verdict read_as drops accepted_by; exit 1 if V refuses any file.",
)
@output_option
def verify_checkpoint(
    files: tuple[Path, ...],
    kubelet_version: Release | None,
    feature_gates: dict[str, bool],
    output: str,
) -> None:
    """Check kubelet checkpoint FILES of any kind: kind, format, entries, stored vs computed
    checksum.

    The kind (devices, cpu, memory, dra) is told by each file's content. Entries are the
    device entries, the CPU or memory assignments of containers, or the DRA claims. A stored
    checksum of 0, which kubelet accepts unverified in old CPU and memory files, shows no
    computed value. Exit status 1 if any file fails (checksum mismatch or unreadable); with
    --kubelet-version, 1 exactly when that release refuses a file. The verdict columns judge
    for V, or for 'any' release (every format any release wrote) without the option.
    """
    from podstore.checkpoint.releases import parse_release

    if feature_gates and kubelet_version is None:
        raise click.UsageError("--feature-gates needs --kubelet-version")
    release = kubelet_version or parse_release("any")

    failed = False
    refused = False

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal failed, refused
        for path in files:
            row, cp = checkpoint_row(path)
            failed |= cp is None
            refused |= add_verdict(row, path, release, feature_gates).verdict == "refuse"
            yield row

    columns = ["file", "kind", "status", "format", "entries", "stored", "computed", "error"]
    columns += ["kubelet_version", "verdict", "read_as", "drops", "accepted_by"]
    emit(rows(), columns, output)
    # Without a release the exit is what it always was: 1 when a file failed to read.
    if refused if kubelet_version is not None else failed:
        sys.exit(1)


def checkpoint_row(path: Path) -> tuple[dict[str, Any], NodeCheckpoint | None]:
    """verify-checkpoint's row for ``path`` (``file kind status format entries stored computed
    error``), and the checkpoint read (None when it failed)."""
    from podstore.checkpoint import detect_kind, read_node_checkpoint

    row: dict[str, Any] = {"file": str(path)}
    try:
        cp = read_node_checkpoint(path)
    except CheckpointError as exc:
        if isinstance(exc, CheckpointCorruptError):
            row.update(status="MISMATCH", stored=exc.expected, computed=exc.actual)
        else:
            row.update(status="UNREADABLE")
        row["error"] = str(exc)
        # What the content looks like, for a file that failed; None when not even that.
        try:
            row["kind"] = detect_kind(path)
        except CheckpointError:
            row["kind"] = None
        return row, None
    row.update(
        kind=cp.kind,
        status="OK",
        format=cp.version,
        entries=cp.entries,
        stored=cp.checksum,
        computed=cp.checksum if cp.verified else None,
    )
    return row, cp


def add_verdict(row: dict[str, Any], path: Path, release: Release, gates: dict[str, bool]) -> Any:
    """Add the columns ``kubelet_version verdict read_as drops accepted_by`` for ``release``
    (its reason in ``error`` when the row has none); the :class:`Verdict`."""
    from podstore.checkpoint.verdict import Verdict, judge_file

    try:
        v = judge_file(path, release, gates, kind=row.get("kind"))
    except OSError as exc:
        v = Verdict(row.get("kind") or "", str(release), "refuse", None, (), (), str(exc))
    row.update(
        kubelet_version=v.kubelet_version,
        verdict=v.verdict,
        read_as=v.read_as,
        drops=list(v.drops),
        accepted_by=list(v.accepted_by),
    )
    if v.reason and not row.get("error"):
        row["error"] = v.reason
    return v
