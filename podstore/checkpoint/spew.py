"""Kubelet's checkpoint checksums: FNV-1a 32 of a go-spew ``%#v`` rendering (rules:
kubelet-semantics §6, docs/node-files.md "The whole-struct checksum").

The device manager's file hashes ``Data.Data``; the other managers' files hash the whole struct
through a pointer (:func:`render_value`). Input is trusted (:mod:`.values` checks it).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fnv_hash_fast import fnv1a_32

from podstore.checkpoint.gotypes import GoType, Int, Map, Ptr, String, Struct, Uint
from podstore.checkpoint.gotypes import Slice as SliceType
from podstore.types import PodDevicesEntry

_NIL = b"<nil>"

# Bytes render as decimal numbers; building them per byte in Python is the slow part of
# hashing a large file, so three translation tables produce the hundreds, tens and units
# digits of every byte at C speed, and a NUL marks a leading zero to drop.
_HUNDREDS = bytes((48 + b // 100) if b >= 100 else 0 for b in range(256))
_TENS = bytes((48 + b // 10 % 10) if b >= 10 else 0 for b in range(256))
_UNITS = bytes(48 + b % 10 for b in range(256))


def _decimal(data: bytes) -> bytes | bytearray:
    """``data`` as go-spew prints a byte slice's elements: ``10 31 10``."""
    if not data:
        return b""
    buf = bytearray(b"\0\0\0 " * len(data))
    buf[0::4] = data.translate(_HUNDREDS)
    buf[1::4] = data.translate(_TENS)
    buf[2::4] = data.translate(_UNITS)
    del buf[-1]
    return buf.translate(None, b"\0")


def _ids(ids: Sequence[str] | None) -> str:
    return "<nil>" if ids is None else "[" + " ".join(ids) + "]"


def _numa_map(devs: Mapping[int, Sequence[str] | None] | None) -> str:
    if devs is None:
        return "<nil>"
    return "map[" + " ".join([f"{numa}:{_ids(devs[numa])}" for numa in sorted(devs)]) + "]"


def entry_text(e: PodDevicesEntry, version: int = 2) -> bytes:
    """One element of the entries slice (v2 rules unless ``version`` is 1, before renaming)."""
    if version == 1:
        # v1 entries come as read_checkpoint gives them: all IDs under NUMA 0.
        ids = e.device_ids
        devs = "([]string)" + ("<nil>" if ids is None else _ids(ids[0]))
    else:
        devs = f"(checkpoint.DevicesPerNUMA){_numa_map(e.device_ids)}"
    head = (
        f"{{PodUID:(string){e.pod_uid} ContainerName:(string){e.container_name}"
        f" ResourceName:(string){e.resource_name}"
        f" DeviceIDs:{devs} AllocResp:([]uint8)".encode()
    )
    resp = e.alloc_resp
    if resp is None:
        return head + b"<nil>}"
    return head + b"[" + bytes(_decimal(resp)) + b"]}"


def render(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    version: int = 2,
) -> bytes:
    """The exact bytes kubelet hashes for these values (v1 entries: ``device_ids`` ``{0: ids}``)."""
    v1 = version == 1
    # BytesIO grows one buffer and getvalue() hands it over without copying, so the rendering
    # (about four times the size of all AllocResp bytes) exists once, not as parts plus a join.
    out = io.BytesIO()
    write = out.write
    suffix = "V1" if v1 else ""
    write(
        f"(checkpoint.checkpointData{suffix}){{PodDeviceEntries:"
        f"([]checkpoint.PodDevicesEntry{suffix})".encode()
    )
    if entries is None:
        write(_NIL)
    else:
        write(b"[")
        for i, e in enumerate(entries):
            if i:
                write(b" ")
            write(entry_text(e, version))
        write(b"]")
    write(b" RegisteredDevices:(map[string][]string)")
    if registered_devices is None:
        write(_NIL + b"}")
    else:
        pairs = [f"{res}:{_ids(registered_devices[res])}" for res in sorted(registered_devices)]
        write(f"map[{' '.join(pairs)}]}}".encode())
    text = out.getvalue()
    del out
    if v1:
        # The v1 rule (§6.3): even inside user data, as kubelet did.
        text = text.replace(b"checkpointDataV1", b"checkpointData", 1)
        text = text.replace(b"PodDevicesEntryV1", b"PodDevicesEntry")
    return text


def checksum_of(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    version: int = 2,
) -> int:
    """Kubelet's checksum of already checked and sanitized values: FNV-1a 32 of :func:`render`."""
    return fnv1a_32(render(entries, registered_devices, version))


# -- any value of the node files' Go types (podstore.checkpoint.gotypes) -----------------------


def render_value(t: GoType, value: Any, renames: Sequence[tuple[str, str]] = ()) -> str:
    """go-spew's ``%#v`` of a pointer to ``value`` of struct type ``t``, then each rename of
    the first occurrence only, as kubelet's ``strings.Replace(…, 1)`` names its versioned types
    (``CPUManagerCheckpointV3`` → ``CPUManagerCheckpoint``)."""
    out: list[str] = ["(*", t.name, ")"]
    _renderer(t)(value, out)
    text = "".join(out)
    for old, new in renames:
        text = text.replace(old, new, 1)
    return text


def checksum_value(t: GoType, value: Any, renames: Sequence[tuple[str, str]] = ()) -> int:
    """FNV-1a 32 of :func:`render_value`: kubelet's whole-struct checksum."""
    return fnv1a_32(render_value(t, value, renames).encode("utf-8"))


def checksum_string(text: str) -> int:
    """Kubelet's checksum of a Go string (``checksum.New(string)``): go-spew renders the
    string as ``(string)`` followed by its bytes."""
    return fnv1a_32(b"(string)" + text.encode("utf-8"))


Render = Callable[[Any, list[str]], None]


@functools.cache  # one renderer per type (types hash by identity)
def _renderer(t: GoType) -> Render:
    """How a value of ``t`` renders where go-spew prints no type: a map key or value, a slice
    element, the value behind a pointer, or a field's value after its type (built once)."""
    if isinstance(t, String):
        return lambda v, out: out.append(v)
    if isinstance(t, Int | Uint):
        return lambda v, out: out.append(str(v))
    if isinstance(t, Struct):
        return _struct(t)
    if isinstance(t, Ptr):
        elem = _renderer(t.elem)

        def ptr(v: Any, out: list[str]) -> None:
            if v is None:
                out.append("<nil>")
            else:
                out.append("<*>")
                elem(v, out)

        return ptr
    if isinstance(t, Map):
        return _map(t)
    if isinstance(t, SliceType):
        return _slice(t)
    raise TypeError(f"no rendering for {t!r}")  # pragma: no cover - the schemas are fixed


def _struct(t: Struct) -> Render:
    # Each field prints "Name:(type)" then its value; a nil pointer field "(*pkg.T)<nil>".
    fields = []
    for i, f in enumerate(t.fields):
        head = ("" if i == 0 else " ") + f"{f.name}:({f.type.name})"
        if isinstance(f.type, Ptr):
            fields.append((head, _renderer(f.type.elem), True))
        else:
            fields.append((head, _renderer(f.type), False))

    def struct(v: Any, out: list[str]) -> None:
        out.append("{")
        for (head, render, pointer), x in zip(fields, v, strict=True):
            out.append(head)
            if pointer and x is None:
                out.append("<nil>")
            else:
                render(x, out)
        out.append("}")

    return struct


def _map(t: Map) -> Render:
    elem = _renderer(t.elem)
    plain = type(t.elem) is String

    def render(v: Any, out: list[str]) -> None:
        if v is None:
            out.append("<nil>")
            return
        out.append("map[")
        sep = ""
        for k in sorted(v):
            out.append(f"{sep}{k}:")
            if plain:
                out.append(v[k])
            else:
                elem(v[k], out)
            sep = " "
        out.append("]")

    return render


def _slice(t: SliceType) -> Render:
    elem = _renderer(t.elem)
    kind = type(t.elem)

    def render(v: Any, out: list[str]) -> None:
        if v is None:
            out.append("<nil>")
        elif kind is String:
            out.append("[" + " ".join(v) + "]")
        elif kind is Int or kind is Uint:
            out.append("[" + " ".join(map(str, v)) + "]")
        else:
            out.append("[")
            for i, x in enumerate(v):
                if i:
                    out.append(" ")
                elem(x, out)
            out.append("]")

    return render
