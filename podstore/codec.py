"""The one codec for ContainerAllocateResponse bytes, so storage code never touches protobuf."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from podstore.deviceplugin import ContainerAllocateResponse
from podstore.errors import InvalidInputError

AllocRespInput = ContainerAllocateResponse | bytes | bytearray | memoryview | None


def decode(data: bytes) -> ContainerAllocateResponse:
    """Parse stored bytes. Raises ``google.protobuf.message.DecodeError`` if they are not a
    ContainerAllocateResponse (empty bytes are a valid, empty message, as in kubelet)."""
    msg = ContainerAllocateResponse()
    msg.ParseFromString(data)
    return msg


def decode_error(data: bytes) -> str | None:
    """Why ``data`` is not a ContainerAllocateResponse, or None when it decodes."""
    try:
        decode(data)
    except (DecodeError, ValueError, TypeError, RuntimeError) as exc:
        return str(exc) or type(exc).__name__
    return None


def encode(value: AllocRespInput, argument: str = "alloc_resp") -> bytes | None:
    """Bytes to store for a message, raw bytes, or None (kubelet's nil response).

    A message is serialised with sorted map keys (kubelet's map order is random, so any order
    is faithful and sorted is reproducible). Raw bytes are kept exactly as given after checking
    that they decode. Raises InvalidInputError naming ``argument`` otherwise.
    """
    if value is None:
        return None
    if isinstance(value, ContainerAllocateResponse):
        return value.SerializeToString(deterministic=True)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        reason = decode_error(data)
        if reason is not None:
            raise InvalidInputError(
                f"{argument}: bytes are not a ContainerAllocateResponse ({reason})"
            )
        return data
    raise InvalidInputError(
        f"{argument}: expected a ContainerAllocateResponse, its serialized bytes, or None; "
        f"got {type(value).__name__}"
    )
