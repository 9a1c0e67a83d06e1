"""The device manager's checkpoint decoded as kubelet's ``json.Unmarshal`` fills its
pre-initialised structs (empty ``PodDeviceEntries`` and ``RegisteredDevices``), with Go's rules
of :mod:`.godecode`: a missing key leaves ``[]``/``map[]``, a repeated key decodes again into
the same place. :func:`load` follows kubelet 1.23–1.29 (v2, then the v1 fallback of
kubernetes#102882).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.godecode import DecodeError as DecodeError
from podstore.checkpoint.godecode import GoSlice, elements, into_slice, mismatch
from podstore.errors import CheckpointCorruptError, CheckpointFormatError
from podstore.types import PodDevicesEntry


@dataclass
class Checkpoint:
    """A verified kubelet checkpoint, as kubelet decoded it; ``entries`` in file order.

    A v1 file's device IDs go under NUMA 0 (``DeviceIDs: null``: ``{0: None}``), as kubelet
    converts them. ``entries_null``: ``PodDeviceEntries`` was ``null`` (``entries`` is ``[]``).
    ``registered_devices`` is ``None`` for ``null``. ``boot_id``: ``None`` when absent (always
    for v1), ``""`` for ``null``.
    """

    version: int
    entries: list[PodDevicesEntry]
    entries_null: bool
    registered_devices: dict[str, list[str] | None] | None
    checksum: int
    boot_id: str | None


def _string_into(cur: str, v: object) -> str:
    if type(v) is str:
        return gojson.fix_string(v)
    if v is None:
        return cur
    raise mismatch(v, "string")


def _uint8_into(cur: int, v: object) -> int:
    if type(v) is gojson.Int:
        n = gojson.parse_uint(v, 8)
        if n is not None:
            return n
    elif v is None:
        return cur
    raise mismatch(v, "uint8")


def _fresh_strings(v: object) -> list[str] | None:
    """A ``[]string`` decoded into a nil slice (every map value starts as one)."""
    if type(v) is list:
        for s in v:
            if type(s) is not str or not s.isascii():
                fresh = into_slice(None, v, _string_into, str)
                assert isinstance(fresh, list)  # nothing to keep past the end of a new slice
                return fresh
        return v
    if v is None:
        return None
    raise mismatch(v, "[]string")


def _strings_into(cur: GoSlice, v: object) -> GoSlice:
    if type(v) is list:
        return into_slice(cur, v, _string_into, str)
    if v is None:
        return None
    raise mismatch(v, "[]string")


# -- struct fields ------------------------------------------------------------------------------


def _field_table(*names: str) -> dict[str, int]:
    table: dict[str, int] = {}
    for i, name in enumerate(names):
        table[name] = i
        table[name.upper()] = i
    return table


def _field(table: dict[str, int], key: str) -> int | None:
    idx = table.get(key)
    if idx is None:
        folded = gojson.fold_name(key)
        if folded is not None:
            idx = table.get(folded)
    return idx


_ENTRY_NAMES = ("PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp")
_ENTRY_FIELDS = _field_table(*_ENTRY_NAMES)
_DATA_FIELDS = _field_table("PodDeviceEntries", "RegisteredDevices")
_TOP_FIELDS_V2 = _field_table("Data", "Checksum", "BootID")
_TOP_FIELDS_V1 = _field_table("Data", "Checksum")

# Kubelet writes NUMA ids in canonical form; look those up instead of parsing them.
_CANONICAL_NUMA = {str(n): n for n in range(-1, 1024)}


class _Entry:
    __slots__ = ("alloc_resp", "container_name", "device_ids", "pod_uid", "resource_name")

    def __init__(self) -> None:
        self.pod_uid = ""
        self.container_name = ""
        self.resource_name = ""
        self.device_ids: Any = None
        self.alloc_resp: bytes | GoSlice = None


NumaMap = dict[int, list[str] | None]


def _numa_into(cur: NumaMap | None, v: object) -> NumaMap | None:
    if type(v) is tuple:
        out = {} if cur is None else cur
        for key, ids in v:
            numa = _CANONICAL_NUMA.get(key)
            if numa is None:
                numa = gojson.parse_int(key, 64)
                if numa is None:
                    raise DecodeError(f"NUMA key {json.dumps(key)} is not a base-10 int64")
            try:
                out[numa] = _fresh_strings(ids)
            except DecodeError as e:
                raise e.under(f"[{json.dumps(key)}]") from None
        return out
    if v is None:
        return None
    raise mismatch(v, "checkpoint.DevicesPerNUMA")


def _alloc_into(cur: bytes | GoSlice, v: object) -> bytes | GoSlice:
    if type(v) is str:
        data = gojson.decode_base64(v)
        if data is None:
            raise DecodeError("illegal base64 data: expected standard base64 with padding")
        return data
    if v is None:
        return None
    if type(v) is list:
        # Go also accepts an array of byte values here.
        base: GoSlice = list(cur) if isinstance(cur, bytes) else cur
        return into_slice(base, v, _uint8_into, int)
    raise mismatch(v, "[]uint8")


def _entry_into(e: _Entry, pairs: tuple[tuple[str, Any], ...], v1: bool) -> None:
    for key, v in pairs:
        idx = _ENTRY_FIELDS.get(key)
        if idx is None:
            idx = _field(_ENTRY_FIELDS, key)
            if idx is None:
                continue
        if idx < 3:
            if type(v) is str:
                if not v.isascii():
                    v = gojson.fix_string(v)
                if idx == 0:
                    e.pod_uid = v
                elif idx == 1:
                    e.container_name = v
                else:
                    e.resource_name = v
            elif v is not None:
                raise mismatch(v, "string").under(_ENTRY_NAMES[idx])
        elif idx == 3:
            try:
                e.device_ids = _strings_into(e.device_ids, v) if v1 else _numa_into(e.device_ids, v)
            except DecodeError as err:
                raise err.under("DeviceIDs") from None
        else:
            try:
                e.alloc_resp = _alloc_into(e.alloc_resp, v)
            except DecodeError as err:
                raise err.under("AllocResp") from None


def _fresh_entries(arr: list[Any], v1: bool) -> list[_Entry]:
    out = []
    for i, item in enumerate(arr):
        e = _Entry()
        if type(item) is tuple:
            try:
                _entry_into(e, item, v1)
            except DecodeError as err:
                raise err.under(f"[{i}]") from None
        elif item is not None:
            entry_type = "checkpoint.PodDevicesEntryV1" if v1 else "checkpoint.PodDevicesEntry"
            raise mismatch(item, entry_type).under(f"[{i}]")
        out.append(e)
    return out


class _Document:
    """kubelet's ``Data`` struct, pre-initialised as kubelet does before decoding."""

    def __init__(self) -> None:
        self.entries: GoSlice = []
        self.registered: dict[str, list[str] | None] | None = {}
        self.checksum = 0
        self.boot_id: str | None = None


def _entries_field(doc: _Document, v: object, v1: bool) -> None:
    if type(v) is list:
        cur = doc.entries
        if not v or not cur:
            doc.entries = _fresh_entries(v, v1)
        else:
            entry_type = "checkpoint.PodDevicesEntryV1" if v1 else "checkpoint.PodDevicesEntry"

            def into(e: _Entry, item: object) -> _Entry:
                if type(item) is tuple:
                    _entry_into(e, item, v1)
                elif item is not None:
                    raise mismatch(item, entry_type)
                return e

            doc.entries = into_slice(cur, v, into, _Entry)
    elif v is None:
        doc.entries = None
    else:
        raise mismatch(v, "[]checkpoint.PodDevicesEntry" + ("V1" if v1 else ""))


def _registered_field(doc: _Document, v: object) -> None:
    if type(v) is tuple:
        reg = doc.registered
        if reg is None:
            reg = doc.registered = {}
        for key, ids in v:
            key = gojson.fix_string(key)
            try:
                reg[key] = _fresh_strings(ids)
            except DecodeError as e:
                raise e.under(f"[{json.dumps(key)}]") from None
    elif v is None:
        doc.registered = None
    else:
        raise mismatch(v, "map[string][]string")


def _under(field: str, decode_field: Callable[..., None], *args: object) -> None:
    """Decode one field; a failure inside it names the field in its path."""
    try:
        decode_field(*args)
    except DecodeError as e:
        raise e.under(field) from None


def _data_field(doc: _Document, v: object, v1: bool) -> None:
    if type(v) is tuple:
        for key, item in v:
            idx = _field(_DATA_FIELDS, key)
            if idx == 0:
                _under("PodDeviceEntries", _entries_field, doc, item, v1)
            elif idx == 1:
                _under("RegisteredDevices", _registered_field, doc, item)
    elif v is not None:
        raise mismatch(v, "checkpoint.checkpointData" + ("V1" if v1 else ""))


def decode_document(tree: object, version: int) -> _Document:
    """A parsed document decoded into kubelet's v2 (or v1) ``Data``; raises :class:`DecodeError`."""
    v1 = version == 1
    doc = _Document()
    if type(tree) is tuple:
        fields = _TOP_FIELDS_V1 if v1 else _TOP_FIELDS_V2
        for key, v in tree:
            idx = _field(fields, key)
            if idx == 0:
                _under("Data", _data_field, doc, v, v1)
            elif idx == 1:
                if type(v) is gojson.Int:
                    n = gojson.parse_uint(v, 64)
                    if n is None:
                        raise mismatch(v, "checksum.Checksum").under("Checksum")
                    doc.checksum = n
                elif v is not None:
                    raise mismatch(v, "checksum.Checksum").under("Checksum")
            elif idx == 2:
                if type(v) is str:
                    doc.boot_id = gojson.fix_string(v)
                elif v is None:
                    doc.boot_id = doc.boot_id or ""
                else:
                    raise mismatch(v, "string").under("BootID")
    elif tree is not None:
        raise mismatch(tree, "checkpoint.Data" + ("V1" if v1 else ""))
    return doc


def _alloc_bytes(value: bytes | GoSlice) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    items = elements(value)
    return None if items is None else bytes(items)


def _entries_of(doc: _Document, v1: bool) -> list[PodDevicesEntry] | None:
    raw: list[_Entry] | None = elements(doc.entries)
    if raw is None:
        return None
    return [
        PodDevicesEntry(
            e.pod_uid,
            e.container_name,
            e.resource_name,
            {0: elements(e.device_ids)} if v1 else e.device_ids,
            e.alloc_resp if type(e.alloc_resp) is bytes else _alloc_bytes(e.alloc_resp),
        )
        for e in raw
    ]


def _verified(doc: _Document, version: int, origin: str) -> Checkpoint:
    entries = _entries_of(doc, version == 1)
    actual = spew.checksum_of(entries, doc.registered, version)
    if actual != doc.checksum:
        raise CheckpointCorruptError(
            doc.checksum,
            actual,
            f"{origin}checkpoint is corrupted: stored checksum {doc.checksum}, "
            f"computed {actual} (format v{version})",
        )
    return Checkpoint(
        version=version,
        entries=[] if entries is None else entries,
        entries_null=entries is None,
        registered_devices=doc.registered,
        checksum=doc.checksum,
        boot_id=None if version == 1 else doc.boot_id,
    )


def load(text: str, origin: str = "") -> Checkpoint:
    """Decode and verify checkpoint text (decoded with ``surrogateescape``) as kubelet
    1.23–1.29 does: v2, and on a decode error or checksum mismatch v1; ``origin`` prefixes
    error messages (``"path: "``).

    Raises :class:`CheckpointFormatError` (the v2 error when v1 fails too) naming the byte
    offset or field at fault, :class:`CheckpointCorruptError` for a checksum mismatch.
    """
    # Kept in one function so that dropping `text` and `tree` really frees them.
    with collector_paused():
        tree: object = parse(text, origin)
        del text
        try:
            doc = decode_document(tree, 2)
        except DecodeError as v2_error:
            try:
                doc = decode_document(tree, 1)
            except DecodeError:
                raise CheckpointFormatError(f"{origin}{v2_error}") from None
            tree = None
            return _verified(doc, 1, origin)
        # Release the parsed tree (the largest thing held) before hashing unless a v1 retry is
        # still possible (a DeviceIDs object never decodes as v1).
        visible: list[_Entry] = elements(doc.entries) or []
        v1_possible = all(e.device_ids is None for e in visible)
        if not v1_possible:
            tree = None
        try:
            return _verified(doc, 2, origin)
        except CheckpointCorruptError as v2_corrupt:
            if not v1_possible:
                raise
            try:
                return _verified(decode_document(tree, 1), 1, origin)
            except (DecodeError, CheckpointCorruptError):
                raise v2_corrupt from None


def parse(text: str, origin: str) -> Any:
    """The parsed document (:func:`.gojson.parse`), or the format error."""
    try:
        return gojson.parse(text)
    except gojson.JSONSyntaxError as e:
        raise CheckpointFormatError(f"{origin}{e}") from None
