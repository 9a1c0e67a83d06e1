"""``podstore import``, ``export`` and ``verify-checkpoint``: kubelet checkpoint files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, escape_controls, output_option
from podstore.cli.progress import progress
from podstore.errors import CheckpointCorruptError, CheckpointError, ImportRefusedError

#: How many skipped entries the import report names one by one before it says "and N more".
SKIPPED_SHOWN = 20


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
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
    merge: bool,
    strict: bool,
    allow_skipped: bool,
    max_bytes: int | None,
) -> None:
    """Load a kubelet_internal_checkpoint FILE into the store, all or nothing.

    Entries whose AllocResp does not decode are skipped, as kubelet skips them; the report
    (stdout) says how many and why. Without --merge the file replaces the store's entries,
    but if every entry of the file was skipped and the store holds entries, the import is
    refused (exit 1, nothing changed) unless --allow-skipped. --strict refuses a file with
    any skipped entry. Exit status 0 when imported (skips included), 1 when refused or the
    file is unreadable, corrupt or too large.
    """
    store = ctx.store()
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
    skipped = report.skipped
    if skipped:
        click.echo(
            f"skipped {len(skipped)} {'entry' if len(skipped) == 1 else 'entries'} whose "
            "AllocResp does not decode (kubelet skips them too):"
        )
        for s in skipped[:SKIPPED_SHOWN]:
            click.echo(
                f"  skipped entry {s.index} ({escape_controls(s.pod_uid)}/"
                f"{escape_controls(s.container_name)}/{escape_controls(s.resource_name)}): "
                f"{escape_controls(s.reason)}"
            )
        if len(skipped) > SKIPPED_SHOWN:
            click.echo(f"  ... and {len(skipped) - SKIPPED_SHOWN} more")


@click.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--boot-id", default=None, help="Add a top-level BootID (unmerged kubelet PR).")
@click.pass_obj
def export(ctx: Context, file: Path, boot_id: str | None) -> None:
    """Write the store as a kubelet_internal_checkpoint FILE (atomic, mode 0600).

    Reads the store read-only: write access to the store is not needed, only to FILE's
    directory.
    """
    store = ctx.store(readonly=True)
    with progress("reading entries") as bar:
        count = store.export_checkpoint(file, boot_id=boot_id, progress=bar)
    click.echo(f"exported {count} entries to {file}")


@click.command("verify-checkpoint")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_option
def verify_checkpoint(files: tuple[Path, ...], output: str) -> None:
    """Check kubelet checkpoint FILES of any kind: kind, format, entries, stored vs computed
    checksum.

    The kind (devices, cpu, memory, dra) is told by each file's content. Entries are the
    device entries, the CPU or memory assignments of containers, or the DRA claims. A stored
    checksum of 0, which kubelet accepts unverified in old CPU and memory files, shows no
    computed value. Exit status 1 if any file fails (checksum mismatch or unreadable).
    """
    from podstore.checkpoint import detect_kind, read_node_checkpoint

    def kind_of(path: Path) -> str | None:
        # What the content looks like, for a file that failed; None when not even that.
        try:
            return detect_kind(path)
        except CheckpointError:
            return None

    failed = False

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal failed
        for path in files:
            row: dict[str, Any] = {"file": str(path)}
            try:
                cp = read_node_checkpoint(path)
            except CheckpointCorruptError as exc:
                failed = True
                row.update(
                    kind=kind_of(path),
                    status="MISMATCH",
                    stored=exc.expected,
                    computed=exc.actual,
                    error=str(exc),
                )
            except CheckpointError as exc:
                failed = True
                row.update(kind=kind_of(path), status="UNREADABLE", error=str(exc))
            else:
                row.update(
                    kind=cp.kind,
                    status="OK",
                    format=cp.version,
                    entries=cp.entries,
                    stored=cp.checksum,
                    computed=cp.checksum if cp.verified else None,
                )
            yield row

    emit(
        rows(),
        ["file", "kind", "status", "format", "entries", "stored", "computed", "error"],
        output,
    )
    if failed:
        sys.exit(1)
