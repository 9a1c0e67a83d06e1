"""The one codec of plugin responses (``ContainerAllocateResponse``): storage code never touches
protobuf, and a response is parsed once per write.

:class:`Response` holds plain tuples, not the message: an import holds one per entry, and
100,000 live messages cost about 250 MB more than their tuples (docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from podstore.errors import InvalidInputError

if TYPE_CHECKING:
    from podstore.deviceplugin import ContainerAllocateResponse

# protobuf is imported only where a response is parsed or built (docs/performance.md).

#: What ``insert`` accepts as ``alloc_resp``.
AllocRespInput: TypeAlias = "ContainerAllocateResponse | bytes | bytearray | memoryview | None"


@dataclass(frozen=True, slots=True)
class Response:
    """A checked plugin response: ``raw`` is stored as is; the rest is what it decodes to (keys
    in code point order, SQLite's BINARY order; lists in list order)."""

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


def parse(data: bytes) -> Response | str:
    """The checked response of ``data``, or why it is not a ContainerAllocateResponse (empty
    bytes are a valid, empty message, as in kubelet)."""
    from google.protobuf.message import DecodeError

    from podstore.deviceplugin import ContainerAllocateResponse

    msg = ContainerAllocateResponse()
    try:
        msg.ParseFromString(data)
        return _decoded(data, msg)
    except (DecodeError, ValueError, TypeError, RuntimeError) as exc:
        return str(exc) or type(exc).__name__


def from_argument(value: AllocRespInput, argument: str = "alloc_resp") -> Response | None:
    """The response to store for a message (serialised with sorted map keys: kubelet's order is
    random, sorted is reproducible), raw bytes that decode (kept as given), or None.

    Raises InvalidInputError naming ``argument`` otherwise.
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
