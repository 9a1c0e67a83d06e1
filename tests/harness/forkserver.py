"""The kill harnesses' fork servers (tests/harness/kill_writer.py, watch_follower.py), driven
line by line.

The test sends one command line per round and reads the server's lines with deadlines; see
kill_writer.py for the protocol.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time

from harness.paths import child_env, script


class ForkServer:
    """A fork server (by default kill_writer's; watch_follower.py for the follower's kills) and
    a line reader with deadlines."""

    def __init__(self, name: str = "kill_writer.py") -> None:
        self.proc = subprocess.Popen(
            script(name),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=child_env(),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._out = self.proc.stdout
        os.set_blocking(self._out.fileno(), False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._out, selectors.EVENT_READ)
        self._buf = b""
        self._pending: list[str] = []

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def lines(self, until: float, stop: str | tuple[str, ...] | None = None) -> list[str]:
        """Complete lines that arrive before the monotonic time ``until`` (or until one
        starting with ``stop``, or with any of several prefixes, has arrived)."""
        out, self._pending = self._pending, []
        if stop and any(line.startswith(stop) for line in out):
            return self._upto(out, stop)
        stops = tuple(p.encode() for p in ((stop,) if isinstance(stop, str) else stop or ()))
        while True:
            timeout = until - time.monotonic()
            if not self._sel.select(max(timeout, 0)):
                break
            chunk = os.read(self._out.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"fork server exited ({self.proc.poll()})")
            self._buf += chunk
            *done, self._buf = self._buf.split(b"\n")
            out.extend(d.decode() for d in done)
            if timeout <= 0 or (stops and any(d.startswith(stops) for d in done)):
                break
        return self._upto(out, stop) if stop else out

    def _upto(self, out: list[str], stop: str | tuple[str, ...]) -> list[str]:
        """``out`` up to its first line starting with ``stop``; the lines after it (they came
        in the same read: a child's last line and the server's "x" often do) are kept for the
        next call instead of being handed out with it."""
        for i, line in enumerate(out):
            if line.startswith(stop):
                self._pending = out[i + 1 :] + self._pending
                return out[: i + 1]
        return out

    def until_line(
        self, prefix: str | tuple[str, ...], timeout: float = 60.0
    ) -> tuple[list[str], str]:
        """The lines before the first one starting with ``prefix`` (or with any of several),
        and that line."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.lines(deadline, stop=prefix)
            for i, line in enumerate(got):
                if line.startswith(prefix):
                    self._pending = got[i + 1 :] + self._pending
                    return seen + got[:i], line
            seen.extend(got)
        raise AssertionError(f"no {prefix!r} line within {timeout}s; saw {seen[-5:]}")

    def close(self) -> None:
        try:
            self.send("quit")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):  # pragma: no cover
            self.proc.kill()
            self.proc.wait()
