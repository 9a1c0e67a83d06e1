"""Follower for the kill -9 harness of ``podstore watch``: a fork server whose children run the
real command (``podstore --db DB watch CP``) until they are killed.

Run as a script. It imports podstore, its command line and watchdog once, then for every line
``run DB CP`` on stdin forks a child that runs ``podstore --db DB watch CP --interval 3600``
(signal handlers, file trigger, syncs: all of the command), and for every line ``node DB
DIR`` one that runs ``podstore --db DB watch --kubelet-dir DIR --interval 3600``. Output
lines on stdout, each one ``write(2)``:

- ``p PID``       a child started
- ``x PID CODE``  the child is gone and reaped (CODE: exit status or -signal)

Forking from a warm process keeps a round to milliseconds; each child is still a separate
process that dies by SIGKILL with the store open, which is the crash under test.
"""

from __future__ import annotations

import os
import sys

import watchdog.observers

from podstore.cli import main as cli_main
from podstore.sqlite.migrate import head_revision


def say(line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def child(db: str, args: list[str]) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        cli_main(["--db", db, "watch", *args, "--interval", "3600"])
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    os._exit(0)


def main() -> None:
    head_revision()  # warm Alembic's script directory before forking
    assert watchdog.observers.Observer is not None
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            return
        what, db, path = parts
        pid = os.fork()
        if pid == 0:
            child(db, [path] if what == "run" else ["--kubelet-dir", path])
        say(f"p {pid}")
        _, status = os.waitpid(pid, 0)
        say(f"x {pid} {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
