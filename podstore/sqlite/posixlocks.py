"""The POSIX record locks this process holds on a file, as the kernel sees them (/proc/locks).

SQLite's unix VFS takes POSIX (fcntl) locks, which belong to the process, and keeps its own
count of which of the process's connections holds what. Two consequences make the kernel's
view worth reading:

- Closing *any* descriptor of a file releases every POSIX lock the process holds on it.
  SQLite never closes a descriptor of a locked file itself, but a plain ``open()`` and
  ``close()`` of the database by podstore would silently drop the locks of every other
  connection of the process — after which another process's last close could checkpoint and
  delete the WAL under them. podstore reads the file itself (the journal mode of a file
  opened ``immutable=1``, ``sqlite/connection.py``) only when the process holds no lock on it
  (:func:`holds_locks`). Reading /proc/locks costs milliseconds on a busy host, so nothing on
  the path of an ordinary open reads it.
- A forked child inherits SQLite's counts but none of the locks: a child's connection made
  while inherited ones were open believes it holds locks it does not hold. podstore checks, in
  a forked child, that its connection's lock is really there (``sqlite/forking.py``).

Linux only: elsewhere the answer is "unknown" (None), and callers assume the worst.
"""

from __future__ import annotations

import os

_PROC_LOCKS = "/proc/locks"


def held(path: str) -> list[tuple[int, int]] | None:
    """(start, end) of every POSIX lock this process holds on ``path`` (end -1: to EOF); None
    where the kernel's lock table cannot be read.

    Matched by inode number alone: /proc/locks names the device of the file system, which on
    some (btrfs subvolumes, overlays) differs from ``st_dev``.
    """
    try:
        ino = os.stat(path).st_ino
        # Bytes: no codec is looked up (a process that dropped privileges may no longer be
        # able to import one).
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
