"""``podstore import``, ``export`` and ``verify-checkpoint``: kubelet checkpoint files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from podstore.cli.context import Context
from podstore.cli.output import emit, output_option
from podstore.errors import CheckpointCorruptError, CheckpointError


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--merge", is_flag=True, help="Insert the file's entries over the existing ones.")
@click.option("--strict", is_flag=True, help="Refuse the file if any entry would be skipped.")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse larger files (default 256 MiB).",
)
@click.pass_obj
def import_(ctx: Context, file: Path, merge: bool, strict: bool, max_bytes: int | None) -> None:
    """Load a kubelet_internal_checkpoint FILE into the store, all or nothing."""
    store = ctx.store()
    if sys.stdout.isatty():
        with click.progressbar(length=1, label="decoding entries", file=sys.stdout) as bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            report = store.import_checkpoint(
                file, merge=merge, strict=strict, max_bytes=max_bytes, progress=progress
            )
    else:
        report = store.import_checkpoint(file, merge=merge, strict=strict, max_bytes=max_bytes)
    click.echo(
        f"imported {report.imported} of {report.entries} entries ({report.pods} pods, "
        f"{report.registered_resources} registered resources) from {file} "
        f"[v{report.version}, checksum {report.checksum}"
        + (f", boot id {report.boot_id}" if report.boot_id else "")
        + ("; merged" if report.merged else "")
        + "]"
    )
    for s in report.skipped:
        click.echo(
            f"skipped entry {s.index} ({s.pod_uid}/{s.container_name}/{s.resource_name}): "
            f"{s.reason}",
            err=True,
        )


@click.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--boot-id", default=None, help="Add a top-level BootID (unmerged kubelet PR).")
@click.pass_obj
def export(ctx: Context, file: Path, boot_id: str | None) -> None:
    """Write the store as a kubelet_internal_checkpoint FILE (atomic, mode 0600)."""
    store = ctx.store(readonly=False)
    if sys.stdout.isatty():
        with click.progressbar(length=1, label="reading entries", file=sys.stdout) as bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            count = store.export_checkpoint(file, boot_id=boot_id, progress=progress)
    else:
        count = store.export_checkpoint(file, boot_id=boot_id)
    click.echo(f"exported {count} entries to {file}")


@click.command("verify-checkpoint")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_option
def verify_checkpoint(files: tuple[Path, ...], output: str) -> None:
    """Check kubelet checkpoint FILES: format, entries, stored vs computed checksum.

    Exit status 1 if any file fails (checksum mismatch or unreadable).
    """
    from podstore.checkpoint import read_checkpoint

    rows: list[dict[str, Any]] = []
    failed = False
    for path in files:
        row: dict[str, Any] = {"file": str(path)}
        try:
            cp = read_checkpoint(path)
        except CheckpointCorruptError as exc:
            failed = True
            row.update(status="MISMATCH", stored=exc.expected, computed=exc.actual, error=str(exc))
        except CheckpointError as exc:
            failed = True
            row.update(status="UNREADABLE", error=str(exc))
        else:
            row.update(
                status="OK",
                format=f"v{cp.version}",
                entries=len(cp.entries),
                stored=cp.checksum,
                computed=cp.checksum,
            )
        rows.append(row)
    emit(rows, ["file", "status", "format", "entries", "stored", "computed", "error"], output)
    if failed:
        sys.exit(1)
