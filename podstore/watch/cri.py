"""``watch --cri-socket``: the container runtime's word on when a container exited, as end
evidence (storage/ends.py) — a gRPC client of the CRI's RuntimeService (runtime.v1).

Each poll lists the runtime's containers, takes each pod container's latest attempt, and asks
``ContainerStatus`` for the ``finished_at`` of those that exited (once per container id in this
process; a restarted watch asks again and the store finds them recorded). A container whose
latest attempt runs again after a restart gives no evidence. A socket that is missing or does
not answer is logged once per change of state and counted (``podstore_cri_polls_total``); the
watch goes on with its other evidence.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from podstore.errors import PodStoreError
from podstore.pure.times import format_ts
from podstore.store import PodStore

log = logging.getLogger("podstore")

#: kubelet's labels on every container it creates: the pod's UID and the container's name.
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

_SERVICE = "/runtime.v1.RuntimeService/"
#: Seconds a CRI call may take before the poll counts the runtime as unreachable.
CALL_TIMEOUT = 5.0

#: Poll results, the ``result`` label of ``podstore_cri_polls_total``.
RESULTS = ("ok", "unreachable", "error")


def finished_time(nanoseconds: int) -> str:
    """A CRI time (nanoseconds since the epoch) in the stored form (microseconds)."""
    seconds, nanos = divmod(int(nanoseconds), 1_000_000_000)
    when = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    return format_ts(when)


class CriClient:
    """ListContainers and ContainerStatus over a unix socket (grpc loads here, not before)."""

    def __init__(self, socket_path: str, *, timeout: float = CALL_TIMEOUT) -> None:
        import grpc  # type: ignore[import-untyped]

        from podstore.criapi import runtime_pb2 as pb

        self.pb: Any = pb
        self.timeout = timeout
        self.channel = grpc.insecure_channel(f"unix:{os.path.abspath(socket_path)}")
        self._list = self.channel.unary_unary(
            _SERVICE + "ListContainers",
            request_serializer=pb.ListContainersRequest.SerializeToString,
            response_deserializer=pb.ListContainersResponse.FromString,
        )
        self._status = self.channel.unary_unary(
            _SERVICE + "ContainerStatus",
            request_serializer=pb.ContainerStatusRequest.SerializeToString,
            response_deserializer=pb.ContainerStatusResponse.FromString,
        )

    def containers(self) -> list[Any]:
        return list(self._list(self.pb.ListContainersRequest(), timeout=self.timeout).containers)

    def status(self, container_id: str) -> Any:
        request = self.pb.ContainerStatusRequest(container_id=container_id)
        return self._status(request, timeout=self.timeout).status

    def close(self) -> None:
        self.channel.close()


def latest_attempts(containers: Iterable[Any]) -> dict[tuple[str, str], Any]:
    """Per (pod UID, container name) of kubelet's containers, its latest attempt."""
    out: dict[tuple[str, str], Any] = {}
    for c in containers:
        pod = c.labels.get(POD_UID_LABEL)
        name = c.labels.get(CONTAINER_NAME_LABEL) or c.metadata.name
        if not pod or not name:
            continue  # not a pod container of kubelet's
        key = (pod, name)
        have = out.get(key)
        order = (c.metadata.attempt, c.created_at)
        if have is None or order > (have.metadata.attempt, have.created_at):
            out[key] = c
    return out


class CriEvidence:
    """Polls the runtime and records each exit as ``runtime`` end evidence."""

    def __init__(self, store: PodStore, socket_path: str) -> None:
        self.store = store
        self.socket_path = socket_path
        self.polls = dict.fromkeys(RESULTS, 0)
        self.up = False
        self.recorded = 0
        self._client: CriClient | None = None
        self._done: set[str] = set()  # container ids whose exit this process has handled
        self._said: str | None = None
        self._lock = threading.Lock()

    def _state(self, result: str, detail: str) -> None:
        self.polls[result] += 1
        self.up = result == "ok"
        if result == "ok":
            if self._said is not None:
                log.info("%s: the container runtime answers again", self.socket_path)
            self._said = None
            return
        if self._said != detail:
            log.warning(
                "%s: %s; runtime end evidence waits, the other evidence goes on",
                self.socket_path,
                detail,
                extra={"event": "cri", "result": result},
            )
            self._said = detail

    def poll(self) -> int:
        """One poll; returns how many end events it wrote (never raises)."""
        with self._lock:
            return self._poll()

    def _poll(self) -> int:
        import grpc

        if not os.path.exists(self.socket_path):
            self._state("unreachable", "no CRI socket there")
            return 0
        try:
            if self._client is None:
                self._client = CriClient(self.socket_path)
            exited = []
            for (pod, name), c in latest_attempts(self._client.containers()).items():
                if c.state != self._client.pb.CONTAINER_EXITED or c.id in self._done:
                    continue
                status = self._client.status(c.id)
                if status.finished_at > 0:
                    exited.append((c.id, (pod, name, "runtime", finished_time(status.finished_at))))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            result = "unreachable" if code == grpc.StatusCode.UNAVAILABLE else "error"
            self._state(result, f"the CRI call failed ({code})")
            return 0
        try:
            written = self.store.record_ends(e for _id, e in exited)
        except PodStoreError as exc:
            self._state("error", f"recording runtime end evidence failed: {exc}")
            return 0
        self._done.update(i for i, _e in exited)
        self._state("ok", "")
        self.recorded += written
        if written:
            log.info("recorded %d container exits from the runtime", written)
        return written

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
