"""Running the ``podstore`` command line from tests: as a real child process, on a
pseudo-terminal, and walking the click group for every command path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click

ENTRY = [sys.executable, "-c", "from podstore.cli import main; main()"]


def podstore(
    *args: str, cwd: Path, env: dict[str, str] | None = None, command: list[str] = ENTRY
) -> subprocess.CompletedProcess[str]:
    """Run podstore ARGS in a child process (PODSTORE_DB unset unless ENV sets it)."""
    base = {k: v for k, v in os.environ.items() if k != "PODSTORE_DB"}
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def status_json(*args: str, cwd: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    out = podstore(*args, "status", "--json", cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    parsed = json.loads(out.stdout)
    assert isinstance(parsed, dict)
    return parsed


def on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run podstore with stdout on a pseudo-terminal; returns (exit code, what it showed)."""
    import pty
    import select

    master, slave = pty.openpty()
    shown = b""
    try:
        proc = subprocess.Popen(
            [*ENTRY, *args],
            cwd=cwd,
            stdout=slave,
            stderr=subprocess.STDOUT,
        )
        os.close(slave)
        while True:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=120)
    finally:
        os.close(master)
    return code, shown.decode("utf-8", "replace")


def subcommand(group: click.Group, name: str) -> click.Command:
    """GROUP's command NAME, loaded as the command line loads it (``podstore`` imports a
    command's module when it is first asked for)."""
    command = group.get_command(click.Context(group), name)
    assert command is not None, name
    return command


def commands(group: click.Group, prefix: str = "podstore") -> Iterator[str]:
    """Every command path of GROUP, subcommands of groups included."""
    for name in group.list_commands(click.Context(group)):
        command = subcommand(group, name)
        path = f"{prefix} {name}"
        yield path
        if isinstance(command, click.Group):
            yield from commands(command, path)


def without_paths(text: str, *paths: str | os.PathLike[str]) -> str:
    """``text`` with every occurrence of ``paths`` (as given and resolved) replaced by
    ``<path>``: what a test may search for words (a temporary directory's random name, or the
    checkout's, may hold any of them)."""
    found = {os.fspath(p) for p in paths} | {str(Path(p).resolve()) for p in paths}
    for path in sorted(found, key=len, reverse=True):
        text = text.replace(path, "<path>")
    return text


def column(table: str, name: str) -> list[str]:
    """The values of column ``name`` of a table the CLI printed (header, then one row per
    line), cut at the header's offsets, so a path in another column cannot reach it."""
    header, *lines = table.splitlines()
    start = header.index(name)
    rest = header[start + len(name) :]
    end = start + len(name) + (len(rest) - len(rest.lstrip())) if rest.strip() else None
    return [line[start:end].strip() for line in lines if line.strip()]
