"""A small container runtime for the tests: a real gRPC server on a unix socket that answers
the CRI's ``ListContainers`` and ``ContainerStatus`` (runtime.v1) from a list the test sets."""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from podstore.criapi import runtime_pb2 as pb

_SERVICE = "runtime.v1.RuntimeService"


@dataclass
class FakeContainer:
    id: str
    pod_uid: str
    name: str
    attempt: int = 0
    running: bool = False
    finished_at: int = 0  # nanoseconds since the epoch; 0: not finished
    created_at: int = 1


class CriServer:
    """Serves ``containers`` (change the list at any time) until :meth:`stop`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.containers: list[FakeContainer] = []
        self.status_calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handlers = {
            "ListContainers": grpc.unary_unary_rpc_method_handler(
                self._list,
                request_deserializer=pb.ListContainersRequest.FromString,
                response_serializer=pb.ListContainersResponse.SerializeToString,
            ),
            "ContainerStatus": grpc.unary_unary_rpc_method_handler(
                self._status,
                request_deserializer=pb.ContainerStatusRequest.FromString,
                response_serializer=pb.ContainerStatusResponse.SerializeToString,
            ),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, handlers),)
        )
        self.server.add_insecure_port(f"unix:{socket}")

    def __enter__(self) -> CriServer:
        self.server.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.stop(None).wait()

    def _state(self, c: FakeContainer) -> int:
        if c.running:
            return int(pb.CONTAINER_RUNNING)
        return int(pb.CONTAINER_EXITED if c.finished_at else pb.CONTAINER_CREATED)

    def _labels(self, c: FakeContainer) -> dict[str, str]:
        return {"io.kubernetes.pod.uid": c.pod_uid, "io.kubernetes.container.name": c.name}

    def _list(self, _request: Any, _context: Any) -> Any:
        return pb.ListContainersResponse(
            containers=[
                pb.Container(
                    id=c.id,
                    pod_sandbox_id="sandbox-" + c.pod_uid,
                    metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
                    state=self._state(c),
                    created_at=c.created_at,
                    labels=self._labels(c),
                )
                for c in self.containers
            ]
        )

    def _status(self, request: Any, context: Any) -> Any:
        self.status_calls += 1
        for c in self.containers:
            if c.id == request.container_id:
                return pb.ContainerStatusResponse(
                    status=pb.ContainerStatus(
                        id=c.id,
                        metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
                        state=self._state(c),
                        created_at=c.created_at,
                        finished_at=c.finished_at,
                        labels=self._labels(c),
                    )
                )
        context.abort(grpc.StatusCode.NOT_FOUND, f"no container {request.container_id}")
        return None
