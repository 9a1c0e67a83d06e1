"""The POSIX locks this process holds on a file, as the kernel sees them (/proc/locks).

SQLite's POSIX locks belong to the process: closing *any* descriptor of the file drops them
all, so podstore reads the file itself only when it holds none (:func:`holds_locks`); and a
forked child inherits SQLite's record of them but not the locks (``sqlite/forking.py``).
Reading /proc/locks costs milliseconds on a busy host: no ordinary open does. Linux only:
elsewhere the answer is None ("unknown") and callers assume the worst.
"""

from __future__ import annotations

import os

_PROC_LOCKS = "/proc/locks"


def held(path: str) -> list[tuple[int, int]] | None:
    """(start, end) of every POSIX lock this process holds on ``path`` (end -1: to EOF);
    None where /proc/locks cannot be read. Matched by inode alone: its device differs from
    ``st_dev`` on btrfs subvolumes and overlays."""
    try:
        ino = os.stat(path).st_ino
        # Bytes: a process that dropped privileges may not import a codec.
        with open(_PROC_LOCKS, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    pid = str(os.getpid()).encode()
    out: list[tuple[int, int]] = []
    for line in lines:
        fields = line.split()
        # "1: POSIX ADVISORY READ 1234 08:01:5678 1073741826 1073742335"; a waiter's line has
        # "->" after the number and holds nothing.
        if len(fields) < 8 or fields[1] != b"POSIX" or fields[4] != pid:
            continue
        try:
            if int(fields[5].rsplit(b":", 1)[1]) != ino:
                continue
            out.append((int(fields[6]), -1 if fields[7] == b"EOF" else int(fields[7])))
        except (IndexError, ValueError):
            continue
    return out


def holds_locks(path: str) -> bool:
    """True when this process holds a POSIX lock on ``path`` — or cannot tell (not Linux)."""
    locks = held(path)
    return locks is None or bool(locks)
