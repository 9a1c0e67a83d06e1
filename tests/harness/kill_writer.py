"""Writer for the kill -9 harness: a fork server whose children run the workload until killed.

Run as a script, with tests/ on PYTHONPATH (harness/paths.py). It imports podstore once, then
for every line ``run SEED START COUNT DB`` on stdin forks a child that opens the store at DB
and performs workload operations START, START+1, … (at most COUNT). For a line ``upgrade MODE
STOP_AT DB`` the child upgrades the store at DB to the head revision, by ``PodStore.open``
(MODE ``open``) or by the command line's ``podstore migrate upgrade`` (MODE ``cli``, the
console script's own entry point, called in the child), reporting the steps of its write
transaction as tests/harness/txwatch.py describes (and stopping itself before step STOP_AT
unless it is -1). Output lines on stdout, each written with one ``write(2)`` (atomic on a
pipe):

- ``p PID``       (fork server) a child started
- ``o``           (child) the store is open
- ``b I``         (child) about to call operation I
- ``a I``         (child) operation I returned: acknowledged
- ``d``           (child) all COUNT operations done; it exits by itself
- ``e I TEXT``    (child) operation I raised (the harness then fails)
- ``x PID CODE``  (fork server) the child is gone and reaped (CODE: exit status or -signal)
- ``s``           (upgrade child) about to upgrade; then ``t``/``q``/``k``/``c``/``z`` steps
- ``D TEXT``      (upgrade child) the upgrade returned (TEXT: what the command printed)

Forking from a warm process keeps a kill round to milliseconds, so the harness can kill a few
hundred times within its budget; each child is still a separate process that dies by SIGKILL
with the store open, which is the crash under test.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback

from harness import workload
from harness.recorder import recording
from harness.txwatch import TransactionWatch
from podstore import PodStore
from podstore.cli.main import main as cli_main
from podstore.sqlite.migrate import head_revision


def say(line: str) -> None:
    data = (line + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def child(seed: int, start: int, count: int, db: str) -> None:
    index = start
    try:
        store = PodStore.open(db)
        say("o")
        for index in range(start, start + count):
            op = workload.make_op(seed, index)
            say(f"b {index}")
            workload.apply(store, op)
            say(f"a {index}")
        store.close()
        say("d")
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        say(f"e {index} {type(exc).__module__}.{type(exc).__name__}: {text!r}")
        os._exit(3)
    os._exit(0)


def upgrade_child(mode: str, stop_at: int, db: str) -> None:
    try:
        printed = io.StringIO()
        with recording(TransactionWatch(say, stop_at)), contextlib.redirect_stdout(printed):
            say("s")
            if mode == "open":
                PodStore.open(db).close()
            else:
                try:
                    cli_main(["--db", db, "migrate", "upgrade"])
                except SystemExit as exc:  # click's standalone mode ends with sys.exit
                    if exc.code not in (0, None):
                        raise
        say(f"D {printed.getvalue().strip()}")
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        say(f"e -1 {type(exc).__module__}.{type(exc).__name__}: {text!r}")
        os._exit(3)
    os._exit(0)


def main() -> None:
    head_revision()  # warm Alembic's script directory before forking
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            return
        pid = os.fork()
        if pid == 0:
            if parts[0] == "upgrade":
                upgrade_child(parts[1], int(parts[2]), parts[3])
            _, seed, start, count, db = parts
            child(int(seed), int(start), int(count), db)
        say(f"p {pid}")
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        say(f"x {pid} {code}")


if __name__ == "__main__":
    main()
