"""``podstore watch --kubelet-version``: what that kubelet release would do with each followed
checkpoint file now (docs/watch.md, "Kubelet release verdicts"). A file is judged again only
when its signature changed, after a follower's sync, never on a scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from podstore.errors import PodStoreError
from podstore.metrics.release import Judged
from podstore.watch.trigger import Signature, signature

if TYPE_CHECKING:
    from podstore.checkpoint.releases import Release

log = logging.getLogger("podstore")


class ReleaseVerdicts:
    """The verdicts of ``release`` (and ``gates``) on ``paths`` (kind → file)."""

    def __init__(
        self, paths: Mapping[str, str], release: Release, gates: Mapping[str, bool]
    ) -> None:
        self.paths = dict(paths)
        self.release = release
        self.gates = dict(gates)
        self._lock = threading.Lock()
        self._seen: dict[str, Signature] = {}
        self._judged: dict[str, Judged] = {}

    def refresh(self) -> None:
        """Judge every file whose signature changed since it was last judged (never raises:
        a file that cannot be judged keeps no series and is logged)."""
        from podstore.checkpoint.verdict import judge_file

        with self._lock:
            for kind, path in self.paths.items():
                sig = signature(path)
                if kind in self._seen and self._seen[kind] == sig:
                    continue
                self._seen[kind] = sig
                if sig is None:
                    self._judged.pop(kind, None)
                    continue
                try:
                    v = judge_file(path, self.release, self.gates, kind=kind)
                except (PodStoreError, OSError) as exc:
                    log.warning("%s: cannot judge for kubelet %s: %s", path, self.release, exc)
                    self._judged.pop(kind, None)
                    continue
                self._judged[kind] = Judged(
                    kind, str(v.kubelet_version), v.verdict == "refuse", len(v.drops)
                )

    def current(self) -> list[Judged]:
        """The verdicts now, by kind."""
        with self._lock:
            return [self._judged[k] for k in sorted(self._judged)]
