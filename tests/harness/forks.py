"""Helpers for the fork tests (tests/test_embed_fork.py, test_embed_torture.py): run a function
in a forked child and get its result back, and read which POSIX locks a process holds on a
file from /proc/locks (the kernel's view, not SQLite's bookkeeping).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def figures(name: str, **values: Any) -> None:
    """Print one line of measured figures (the embedding tests' numbers, quoted in
    docs/api.md), e.g. ``[embed] {"figures": "loop-lag", ...}``."""
    print(f"[embed] {json.dumps({'figures': name, **values})}", file=sys.stderr)


def in_child(fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Fork; the child runs ``fn`` and sends back its JSON-able result (or the repr of what it
    raised, as ``{"raised": type, "message": text}``) and leaves with os._exit. The parent
    waits (SIGKILLing a child that outlives ``timeout``) and returns the result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            try:
                out: Any = {"result": fn()}
            except BaseException as exc:
                out = {
                    "raised": type(exc).__name__,
                    "message": str(exc),
                    "trace": traceback.format_exc(),
                }
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = read_all(read_end, pid, timeout)
    return json.loads(data) if data else {"raised": "NoResult", "message": "child sent nothing"}


def read_all(fd: int, pid: int, timeout: float) -> bytes:
    """Everything written to ``fd`` until the child ``pid`` exits; the child is killed once
    ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    chunks = []
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            chunks.append(chunk)
            continue
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done and chunk is not None:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"child {pid} did not finish within {timeout} s")
        time.sleep(0.005)
    os.close(fd)
    return b"".join(chunks)


def locks_held(pid: int, path: str | Path) -> list[tuple[str, int, int]]:
    """The POSIX locks process ``pid`` holds on ``path``, as (READ|WRITE, start, end), read from
    /proc/locks (matched by inode number: the device field there need not equal st_dev)."""
    ino = os.stat(path).st_ino
    out = []
    with open("/proc/locks", encoding="ascii") as f:
        for line in f:
            fields = line.split()
            if "->" in fields:  # a process waiting for a lock, not holding one
                continue
            if len(fields) < 8 or fields[1] != "POSIX":
                continue
            if int(fields[4]) != pid or int(fields[5].rsplit(":", 1)[1]) != ino:
                continue
            end = -1 if fields[7] == "EOF" else int(fields[7])
            out.append((fields[3], int(fields[6]), end))
    return out
