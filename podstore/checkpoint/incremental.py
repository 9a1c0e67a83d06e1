"""Reading a checkpoint again as kubelet rewrites it: entries of the last file, known by their exact
JSON text, are not decoded or rendered twice.

In kubelet's layout (``{"Data":{"PodDeviceEntries":[…``) each element decodes into a fresh struct,
so its value and its checksum text depend on its own text alone: :class:`EntryCache` keeps both for
the last file. :func:`read_cached` returns exactly what :func:`read_checkpoint` returns, the same
value or the same error: every file it cannot take in full (another layout, a syntax or type error,
a checksum mismatch, a possible v1 file, a second ``PodDeviceEntries``, an escape outside the
entries) goes through ``read_checkpoint``'s own decoder. The checksum always covers the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fnv_hash_fast import fnv1a_32

from podstore.checkpoint import decode, files, gojson, spew
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.decode import Checkpoint
from podstore.types import PodDevicesEntry

_PREFIX = '{"Data":{"PodDeviceEntries":['
# What follows an element in kubelet's layout: the next element, or the end of the array.
_NEXT = '},{"PodUID":'
_LAST = "}],"
# The element scanner of the very decoder gojson.parse uses (same hooks, so the same values).
_SCAN: Callable[[str, int], tuple[Any, int]] = gojson._DECODER.scan_once  # type: ignore[attr-defined]


@dataclass
class EntryCache:
    """Decoded entries and their checksum text, by the exact JSON text of the element; holds
    the entries of the last file read (``hits`` and ``misses`` count its look-ups)."""

    entries: dict[str, tuple[PodDevicesEntry, bytes]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0


def read_cached(
    path: str | os.PathLike[str], cache: EntryCache, *, max_bytes: int = files.DEFAULT_MAX_BYTES
) -> Checkpoint:
    """:func:`podstore.checkpoint.read_checkpoint` of ``path``, reusing ``cache`` (and
    refilling it with this file's entries). Same result, same errors."""
    name = os.fspath(path)
    if not isinstance(name, str):
        name = os.fsdecode(name)
    text = files._read_text(name, max_bytes)
    with collector_paused():
        fast = _fast(text, cache)
        if fast is not None:
            return fast
    return decode.load(text, f"{name}: ")


def _fast(text: str, cache: EntryCache) -> Checkpoint | None:
    if not text.startswith(_PREFIX):
        return None
    old = cache.entries
    new: dict[str, tuple[PodDevicesEntry, bytes]] = {}
    entries: list[PodDevicesEntry] = []
    parts: list[bytes] = []
    pos = len(_PREFIX)
    hits = misses = 0
    if text.startswith("]", pos):
        pos += 1
    else:
        while True:
            if not text.startswith("{", pos):
                return None
            # Where the element ends if it is one of the last file's: a complete JSON object
            # ends at its own closing brace, so text equal to a known element *is* that
            # element, wherever a marker inside a string made the guess stop.
            end = text.find(_NEXT, pos)
            if end < 0:
                end = text.find(_LAST, pos)
            end += 1
            raw = text[pos:end] if end > pos else ""
            known = old.get(raw) if raw else None
            if known is None:
                misses += 1
                try:
                    item, end = _SCAN(text, pos)
                except Exception:  # a syntax error, NaN, deep nesting: the slow path says
                    return None
                raw = text[pos:end]
                known = new.get(raw) or old.get(raw)
                if known is None:
                    decoded = _decode_entry(item)
                    if decoded is None:
                        return None
                    known = (decoded, spew.entry_text(decoded))
            else:
                hits += 1
            new[raw] = known
            entries.append(known[0])
            parts.append(known[1])
            pos = end
            if text.startswith(",", pos):
                pos += 1
                continue
            if text.startswith("]", pos):
                pos += 1
                break
            return None
    rest = text[pos:]
    # The rest decodes as in the slow path, with the entries array left empty; it must not be
    # able to touch the entries (a second PodDeviceEntries key, in any spelling Go accepts).
    if "\\" in rest or "poddeviceentrie" in rest.lower():
        return None
    try:
        doc = decode.decode_document(gojson.parse(_PREFIX + "]" + rest), 2)
    except (decode.DecodeError, gojson.JSONSyntaxError):
        return None
    if not isinstance(doc.entries, list) or doc.entries:
        return None
    # One join (the text is about four times the size of all AllocResp bytes).
    pieces = [spew.header(2), b"["]
    for part in parts:
        pieces += (part, b" ")
    if parts:
        pieces[-1] = b"]"
    else:
        pieces.append(b"]")
    pieces.append(spew.registered_text(doc.registered))
    rendered = b"".join(pieces)
    if fnv1a_32(rendered) != doc.checksum:
        return None  # the slow path raises the error (or reads it as v1)
    cache.entries = new
    cache.hits += hits
    cache.misses += misses
    return Checkpoint(
        version=2,
        entries=entries,
        entries_null=False,
        registered_devices=doc.registered,
        checksum=doc.checksum,
        boot_id=doc.boot_id,
    )


def _decode_entry(item: Any) -> PodDevicesEntry | None:
    """One element as the slow path decodes it into a fresh struct (None: it raises there)."""
    if type(item) is not tuple:
        return None
    e = decode._Entry()
    try:
        decode._entry_into(e, item, False)
    except decode.DecodeError:
        return None
    alloc = e.alloc_resp if type(e.alloc_resp) is bytes else decode._alloc_bytes(e.alloc_resp)
    return PodDevicesEntry(e.pod_uid, e.container_name, e.resource_name, e.device_ids, alloc)
