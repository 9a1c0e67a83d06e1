"""Noticing that the checkpoint file changed: inotify events through watchdog, and a stat
signature the follower polls as a fallback.

kubelet replaces the file by rename (a ``.``-prefixed temp file in the same directory, then
``rename(2)``), so the directory is watched, not the file: a watch on the file would die with
the old inode. When the directory does not exist yet (a node before its first device plugin),
the deepest existing ancestor is watched instead and the watch moves down as the path appears;
when the watched directory is removed, it moves back up. The watchdog thread only rings the
follower's wake-up; (re)arming happens in the follower's thread (:meth:`FileTrigger.refresh`),
never inside watchdog's dispatch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("podstore")

#: (device, inode, size, mtime ns, ctime ns) of the file, or None when it is missing.
Signature = tuple[int, int, int, int, int] | None


def signature(path: str) -> Signature:
    """What tells one version of the file from the next without reading it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _deepest_existing(directory: str) -> str:
    while not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return directory


class FileTrigger:
    """Rings ``wake`` when the file at ``path`` may have changed.

    ``start`` raises nothing: when file events cannot be had (watchdog missing, inotify
    limits, a file system without events) it logs once and the follower's polling carries
    on alone.
    """

    def __init__(self, path: str, wake: Callable[[], None]) -> None:
        self.path = os.path.abspath(path)
        self.directory, self.name = os.path.split(self.path)
        self._wake = wake
        self._observer: Any = None
        self._watch: Any = None
        self._armed: str | None = None
        self._lock = threading.Lock()
        self._rearm = False

    def start(self) -> None:
        try:
            from watchdog.observers import Observer
        except ImportError as exc:
            log.warning("file events unavailable (%s); polling only", exc)
            return
        try:
            observer = Observer()
            observer.daemon = True
            observer.start()
        except OSError as exc:  # pragma: no cover - depends on the host's inotify
            log.warning("file events unavailable (%s); polling only", exc)
            return
        self._observer = observer
        self.refresh()

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def refresh(self) -> bool:
        """Move the watch to the deepest existing directory on the path; True if it moved
        (the follower then syncs, since events may have been missed meanwhile)."""
        if self._observer is None:
            return False
        with self._lock:
            self._rearm = False
        target = _deepest_existing(self.directory)
        if target == self._armed and self._watch is not None:
            return False
        self._unschedule()
        try:
            self._watch = self._observer.schedule(_Handler(self), target, recursive=False)
        except OSError as exc:
            # The directory vanished between the check and the watch, or inotify is out of
            # watches: stay unarmed; the next refresh (poll tick) tries again.
            log.warning("cannot watch %s (%s); polling", target, exc)
            self._armed = None
            return True
        moved = self._armed is not None
        self._armed = target
        if target != self.directory:
            log.info("%s does not exist yet; watching %s", self.directory, target)
        elif moved:
            log.info("watching %s again", target)
        return True

    @property
    def needs_refresh(self) -> bool:
        with self._lock:
            return self._rearm

    def _unschedule(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            # Its emitter may have stopped already (the directory was removed).
            with contextlib.suppress(KeyError, OSError):
                self._observer.unschedule(watch)

    # Called on watchdog's thread.
    def _on_event(self, event: Any) -> None:
        armed = self._armed
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(getattr(event, "dest_path", "") or "")
        if armed != self.directory:
            # Watching an ancestor: anything may be the next path component appearing.
            with self._lock:
                self._rearm = True
            self._wake()
            return
        if event.is_directory and src == armed:
            if event.event_type == "deleted":
                with self._lock:
                    self._rearm = True
                self._wake()
            return
        if self.path in (src, dest) and event.event_type not in ("opened", "closed_no_write"):
            self._wake()


class _Handler:
    """watchdog's handler protocol, forwarding to the trigger."""

    def __init__(self, trigger: FileTrigger) -> None:
        self._trigger = trigger

    def dispatch(self, event: Any) -> None:
        self._trigger._on_event(event)
