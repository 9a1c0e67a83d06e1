"""Where a process is inside its write transactions, told over a pipe; optionally, stop there.

Used by the migration kill harness (kill_writer.py's ``upgrade`` command). Every statement a
podstore connection runs goes through ``recorder.recording``; this Recording writes one line
per step of a write transaction instead of keeping them:

- ``t N``  about to run BEGIN IMMEDIATE (a write transaction — the migration's — starts)
- ``q N``  about to run a statement inside it
- ``k N``  about to COMMIT
- ``c N``  COMMIT returned: the transaction is durable

``N`` counts these steps from 0. With ``stop_at=N`` the process stops itself (SIGSTOP) just
before step N (for a ``c`` step: just after COMMIT returned), after saying ``z N``; the
harness then kills it with SIGKILL there. A stopped process killed by SIGKILL dies exactly as
a running one does — nothing runs in between — so a kill can be placed on every statement of a
migration, even one that takes a millisecond, where a timer would miss it. Timed kills (no
stop) land inside statements instead.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from harness.recorder import Event, Recording


class TransactionWatch(Recording):
    def __init__(self, say: Callable[[str], None], stop_at: int = -1) -> None:
        super().__init__()
        self._say = say
        self._stop_at = stop_at
        self._step = 0
        self._writing: set[int] = set()  # connections inside a write transaction

    def _mark(self, kind: str) -> None:
        step = self._step
        self._step += 1
        if step == self._stop_at:
            self._say(f"z {step}")
            os.kill(os.getpid(), signal.SIGSTOP)
        self._say(f"{kind} {step}")

    def add(self, event: Event) -> None:
        if event.kind not in ("exec", "many"):
            return
        head = event.sql.lstrip()[:16].upper()
        if head.startswith("BEGIN IMMEDIATE"):
            self._writing.add(event.conn)
            self._mark("t")
        elif event.conn not in self._writing:
            return
        elif head.startswith(("COMMIT", "END")):
            self._mark("k")
        elif head.startswith("ROLLBACK") and not head.startswith("ROLLBACK TO"):
            self._writing.discard(event.conn)
        else:
            self._mark("q")

    def done(self, event: Event) -> None:
        if event.conn in self._writing and event.sql.lstrip()[:6].upper() in ("COMMIT", "END"):
            self._writing.discard(event.conn)
            self._mark("c")
