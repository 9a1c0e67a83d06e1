"""Shippers on request: the processes of the fleet kill -9 and concurrency tests.

Run ``ship_child.py``: it imports podstore, SQLAlchemy and psycopg once, prints ``zygote``,
then for every line ``DB URL NODE BATCH`` on stdin forks a shipper. The shipper opens the
store read-only, connects to the fleet database, prints ``ready PID`` and waits for SIGUSR1;
then it ships and prints ``report JSON``. Forking from a warm process makes a round of the
kill test cost milliseconds instead of an interpreter start, while each shipper is still a
real process of its own, killed with SIGKILL wherever it happens to be.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys

import psycopg  # noqa: F401  (imported before forking: the children start warm)
import sqlalchemy  # noqa: F401

from podstore import PodStore
from podstore.fleet import db as fleet_db
from podstore.fleet.ship import ship
from podstore.fleet.urls import resolve


def _say(line: str) -> None:
    # One write(2) of less than PIPE_BUF bytes: lines of shippers running at once never mix.
    os.write(1, (line + "\n").encode())


def _shipper(db: str, url: str, node: str, batch: int) -> None:
    store = PodStore.open(db, readonly=True, verify="off")
    fleet_db.engine(resolve(url)).connect().close()
    _say(f"ready {os.getpid()}")
    signal.sigwait({signal.SIGUSR1})
    report = ship(store, url, node=node, batch_size=batch)
    _say("report " + json.dumps(dataclasses.asdict(report)))
    store.close()


def main() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("zygote", flush=True)
    for line in sys.stdin:
        db, url, node, batch = line.split()
        # Blocked before the fork, so a SIGUSR1 sent as soon as "ready" is read cannot
        # arrive before sigwait and kill the shipper.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = 0
            try:
                _shipper(db, url, node, int(batch))
            except BaseException as exc:
                _say(f"error {exc!r}")
                code = 1
            os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


if __name__ == "__main__":
    main()
