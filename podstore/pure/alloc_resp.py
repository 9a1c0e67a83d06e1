"""The one codec of plugin responses (``ContainerAllocateResponse``), so that storage code never
touches protobuf itself.

A response is parsed (or serialised) once per write: :class:`Response` carries the bytes to
store and the settings they decode to, in the order the decoded response rows keep them
(``storage/responses.py`` writes those rows without a second parse). Plain tuples rather than
the protobuf message: an import holds one per entry until it writes, and 100,000 live messages
cost about 250 MB more than their tuples (docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from podstore.errors import InvalidInputError

if TYPE_CHECKING:
    from podstore.deviceplugin import ContainerAllocateResponse

# protobuf is imported where a response is parsed or built (a write, a decode), never by a
# process that only reads (docs/performance.md, "Start-up").

#: What ``insert`` accepts as ``alloc_resp``.
AllocRespInput: TypeAlias = "ContainerAllocateResponse | bytes | bytearray | memoryview | None"


@dataclass(frozen=True, slots=True)
class Response:
    """A checked plugin response: ``raw`` is stored as is; the rest is what it decodes to, each
    section in row order (env and annotation keys ascending — code point order, which is the
    UTF-8 byte order SQLite's BINARY collation uses — list fields in list order)."""

    raw: bytes
    envs: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str, bool], ...] = ()  # container path, host path, read-only
    devices: tuple[tuple[str, str, str], ...] = ()  # container path, host path, permissions
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


def _decoded(raw: bytes, msg: ContainerAllocateResponse) -> Response:
    # tuple([...]) over tuple(generator): this runs once per write and per imported entry.
    mounts, devices, cdi_devices = msg.mounts, msg.devices, msg.cdi_devices
    return Response(
        raw,
        tuple(sorted(msg.envs.items())) if msg.envs else (),
        tuple([(m.container_path, m.host_path, m.read_only) for m in mounts]) if mounts else (),
        tuple([(d.container_path, d.host_path, d.permissions) for d in devices]) if devices else (),
        tuple(sorted(msg.annotations.items())) if msg.annotations else (),
        tuple([c.name for c in cdi_devices]) if cdi_devices else (),
    )


def decode(data: bytes) -> ContainerAllocateResponse:
    """Parse stored bytes. Raises ``google.protobuf.message.DecodeError`` if they are not a
    ContainerAllocateResponse (empty bytes are a valid, empty message, as in kubelet)."""
    from podstore.deviceplugin import ContainerAllocateResponse

    msg = ContainerAllocateResponse()
    msg.ParseFromString(data)
    return msg


def parse(data: bytes) -> Response | str:
    """The checked response of ``data``, or why it is not a ContainerAllocateResponse."""
    from google.protobuf.message import DecodeError

    try:
        return _decoded(data, decode(data))
    except (DecodeError, ValueError, TypeError, RuntimeError) as exc:
        return str(exc) or type(exc).__name__


def from_argument(value: AllocRespInput, argument: str = "alloc_resp") -> Response | None:
    """The response to store for a message, raw bytes, or None (kubelet's nil response).

    A message is serialised with sorted map keys (kubelet's map order is random, so any order
    is faithful and sorted is reproducible). Raw bytes are kept exactly as given once they are
    known to decode. Raises InvalidInputError naming ``argument`` otherwise.
    """
    if value is None:
        return None
    from podstore.deviceplugin import ContainerAllocateResponse

    if isinstance(value, ContainerAllocateResponse):
        return _decoded(value.SerializeToString(deterministic=True), value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        parsed = parse(bytes(value))
        if isinstance(parsed, str):
            raise InvalidInputError(
                f"{argument}: bytes are not a ContainerAllocateResponse ({parsed})"
            )
        return parsed
    raise InvalidInputError(
        f"{argument}: expected a ContainerAllocateResponse, its serialized bytes, or None; "
        f"got {type(value).__name__}"
    )
