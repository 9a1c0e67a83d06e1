"""Noticing that the checkpoint file changed: inotify events through watchdog, and a stat
signature the follower polls as a fallback.

kubelet replaces the file by rename, so the directory is watched (a watch on the file would
die with the old inode); while it does not exist, its deepest existing ancestor is. Watchdog's
thread only rings the wake-up; (re)arming runs in the follower's thread. Arming races the file
system (a directory made just before its watch sends its event to nobody; one made again
under the same name leaves a dead watch), so after every arming the path is looked at again,
and directories are told apart by (device, inode).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("podstore")

#: Arming rounds in one refresh while the path keeps changing (each round re-checks after
#: arming); past it the next wake-up goes on.
_REARM_LIMIT = 16

#: (device, inode, size, mtime ns, ctime ns) of the file, or None when it is missing.
Signature = tuple[int, int, int, int, int] | None


def signature(path: str) -> Signature:
    """What tells one version of the file from the next without reading it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _deepest_existing(directory: str) -> str:
    while not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return directory


class FileTrigger:
    """Rings ``wake`` when the file at ``path`` may have changed. ``start`` raises nothing:
    without file events (no watchdog, inotify limits) it logs once and polling carries on."""

    def __init__(self, path: str, wake: Callable[[], None]) -> None:
        self.path = os.path.abspath(path)
        self.directory, self.name = os.path.split(self.path)
        self._wake = wake
        self._observer: Any = None
        self._watch: Any = None
        self._handler: _Handler | None = None
        self._armed: str | None = None
        # A directory removed and made again under its name is another one: the watch is dead.
        self._armed_id: tuple[int, int] | None = None
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
        was = self._armed
        moved = False
        for _ in range(_REARM_LIMIT):
            target = _deepest_existing(self.directory)
            identity = _identity(target)
            if (
                target == self._armed
                and identity == self._armed_id
                and self._handler is not None
                and not self._handler.gone.is_set()
            ):
                break
            moved = True
            failed = self._arm(target, identity)
            if failed is not None:
                if failed.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue  # it went while being armed: look again
                # inotify out of watches, say: stay unarmed until the next poll tick.
                return True
            # Look again now that the watch is armed: a directory created between the look
            # and the arming sent its event to nobody, and nothing else would tell us.
        else:
            with self._lock:
                self._rearm = True  # still changing under us: go on at the next wake-up
            self._wake()
        if moved and self._armed is not None:
            if self._armed != self.directory:
                log.info("%s does not exist yet; watching %s", self.directory, self._armed)
            elif was is not None:
                log.info("watching %s again", self._armed)
        return moved

    def _arm(self, target: str, identity: tuple[int, int] | None) -> OSError | None:
        """Watch ``target`` instead of the armed directory; the error when it cannot be."""
        self._unschedule()
        handler = _Handler(self, target)
        try:
            self._watch = self._observer.schedule(handler, target, recursive=False)
        except OSError as exc:
            self._armed = self._armed_id = None
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                log.warning("cannot watch %s (%s); polling", target, exc)
            return exc
        self._armed, self._armed_id, self._handler = target, identity, handler
        return None

    @property
    def armed(self) -> str | None:
        """The directory watched now (None: none, or no file events)."""
        return self._armed

    @property
    def needs_refresh(self) -> bool:
        with self._lock:
            return self._rearm

    def _unschedule(self) -> None:
        watch, self._watch, self._handler = self._watch, None, None
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
    """watchdog's handler for the watch on ``target``. ``gone`` is set when ``target`` was
    removed: that watch is dead even if a directory of its name and inode is back by then."""

    def __init__(self, trigger: FileTrigger, target: str) -> None:
        self._trigger = trigger
        self.target = target
        self.gone = threading.Event()

    def dispatch(self, event: Any) -> None:
        if (
            event.is_directory
            and event.event_type == "deleted"
            and os.fsdecode(event.src_path) == self.target
        ):
            self.gone.set()
        self._trigger._on_event(event)
