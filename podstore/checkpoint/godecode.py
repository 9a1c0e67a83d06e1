"""``json.Unmarshal`` into a Go value, for the types of :mod:`podstore.checkpoint.gotypes`.

Go decodes *into* a value that may hold data: ``null`` nils a map, slice or pointer and leaves
anything else; a struct keeps unmentioned fields (keys match exactly, then case-insensitively);
a map keeps earlier keys, each value decoded into a fresh zero; a slice decodes over its earlier
elements (Go issue 21092; :class:`Slice` keeps what a shorter array cut off); ``1.0`` into an
int fails; invalid UTF-8 becomes U+FFFD.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from podstore.checkpoint import gojson
from podstore.checkpoint.gotypes import GoType, Int, Map, Ptr, String, Struct, Uint
from podstore.checkpoint.gotypes import Slice as SliceType


class DecodeError(Exception):
    """A value Go's decoder refuses; ``path`` names where, outermost first."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    def under(self, part: str) -> DecodeError:
        self.path.insert(0, part)
        return self

    def __str__(self) -> str:
        where = ""
        for part in self.path:
            where += part if part.startswith("[") or not where else "." + part
        return f"{where}: {self.message}" if where else self.message


def mismatch(value: object, go_type: str) -> DecodeError:
    return DecodeError(f"cannot unmarshal {gojson.kind(value)} into Go value of type {go_type}")


class Slice:
    """A Go slice shorter than its backing array: ``items[:length]`` are its elements, the rest
    are what a later, longer array decodes over."""

    __slots__ = ("items", "length")

    def __init__(self, items: list[Any], length: int) -> None:
        self.items = items
        self.length = length


T = TypeVar("T")
GoSlice = list[Any] | Slice | None


def elements(value: GoSlice) -> list[Any] | None:
    """The elements of a decoded slice (``None`` for nil)."""
    if isinstance(value, Slice):
        return value.items[: value.length]
    return value


def into_slice(
    cur: GoSlice, arr: list[Any], into: Callable[[T, Any], T], zero: Callable[[], T]
) -> list[Any] | Slice:
    """Go's decoding of a JSON array into an existing slice (``decodeState.array``)."""
    if not arr:
        return []
    if cur is None:
        items: list[Any] = []
        length = 0
    elif isinstance(cur, Slice):
        items, length = cur.items, cur.length
    else:
        # A plain list may be shared with the parsed tree, so work on a copy.
        items = list(cur)
        length = len(items)
    for i, v in enumerate(arr):
        if i >= length:
            length = i + 1
            if i >= len(items):
                items.append(zero())
        try:
            items[i] = into(items[i], v)
        except DecodeError as e:
            raise e.under(f"[{i}]") from None
    length = min(length, len(arr))
    return items if length == len(items) else Slice(items, length)


def key_text(key: str) -> str:
    """A map key as an error path shows it: ``["pod-1"]``."""
    return f"[{json.dumps(key)}]"


Decoder = Callable[[Any, Any], Any]
# Counts the slices shortened by a later, shorter array (only duplicate keys do that), so that
# decode_value knows whether the cut-to-length pass is needed at all.
_shortened = threading.local()


def decode(t: GoType, cur: Any, v: Any) -> Any:
    """``cur`` of type ``t`` after Go decodes the parsed JSON ``v`` into it (use the result in
    its place; slices may come back as :class:`Slice`: see :func:`decode_value`).

    Raises :class:`DecodeError` naming the path of the first value Go would refuse.
    """
    return decoder(t)(cur, v)


def decode_value(t: GoType, cur: Any, v: Any) -> Any:
    """:func:`decode`, then :func:`finished` when a slice was shortened on the way."""
    before = getattr(_shortened, "count", 0)
    value = decoder(t)(cur, v)
    if getattr(_shortened, "count", 0) != before:
        value = finished(t, value)
    return value


@functools.cache  # one decoder per type (types hash by identity)
def decoder(t: GoType) -> Decoder:
    """The decoding function of ``t``."""
    if isinstance(t, String):
        return _string_decoder(t.name)
    if isinstance(t, Int | Uint):
        return _int_decoder(t.name, t.bits, isinstance(t, Int))
    if isinstance(t, Struct):
        return t.unmarshal or _struct_decoder(t)
    if isinstance(t, Map):
        return _map_decoder(t)
    if isinstance(t, SliceType):
        return _slice_decoder(t)
    if isinstance(t, Ptr):
        return _ptr_decoder(t)
    raise TypeError(f"no decoder for {t!r}")  # pragma: no cover - the schemas are fixed


def _string_decoder(name: str) -> Decoder:
    fix = gojson.fix_string

    def dec(cur: Any, v: Any) -> Any:
        if type(v) is str:
            return v if v.isascii() else fix(v)
        if v is None:
            return cur
        raise mismatch(v, name)

    return dec


def _int_decoder(name: str, bits: int, signed: bool) -> Decoder:
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    number = gojson.Int

    def dec(cur: Any, v: Any) -> Any:
        # A JSON integer literal has no sign but '-' and no leading zero, so int() reads it as
        # strconv.ParseInt / ParseUint do; a literal longer than any 64-bit value is out of range
        # (and never reaches int(), whose digit limit it could exceed).
        if type(v) is number:
            if len(v) <= 20 and not (v[0] == "-" and not signed):
                n = int(v)
                if low <= n <= high:
                    return n
        elif v is None:
            return cur
        raise mismatch(v, name)

    return dec


def _struct_decoder(t: Struct) -> Decoder:
    decoders = [decoder(f.type) for f in t.fields]
    keys = [f.key for f in t.fields]
    index = t._index
    lookup = t.field_index
    name = t.name

    def dec(cur: Any, v: Any) -> Any:
        if type(v) is tuple:
            for key, item in v:
                idx = index.get(key)
                if idx is None:
                    idx = lookup(key)
                    if idx is None:
                        continue
                try:
                    cur[idx] = decoders[idx](cur[idx], item)
                except DecodeError as e:
                    raise e.under(keys[idx]) from None
            return cur
        if v is None:
            return cur
        raise mismatch(v, name)

    return dec


def _map_decoder(t: Map) -> Decoder:
    elem = decoder(t.elem)
    zero = t.elem.zero
    name = t.name
    kt = t.key
    fix = gojson.fix_string
    string_keys = type(kt) is String
    plain_strings = type(t.elem) is String

    def dec(cur: Any, v: Any) -> Any:
        if type(v) is tuple:
            out: dict[Any, Any] = {} if cur is None else cur
            for key, item in v:
                k = (key if key.isascii() else fix(key)) if string_keys else _map_key(kt, key)
                if plain_strings and type(item) is str and item.isascii():
                    out[k] = item
                    continue
                try:
                    out[k] = elem(zero(), item)
                except DecodeError as e:
                    raise e.under(key_text(key)) from None
            return out
        if v is None:
            return None
        raise mismatch(v, name)

    return dec


def _slice_decoder(t: SliceType) -> Decoder:
    elem = decoder(t.elem)
    zero = t.elem.zero
    name = t.name

    def dec(cur: Any, v: Any) -> Any:
        if type(v) is list:
            if cur is None or (type(cur) is list and not cur):
                # A fresh slice: each element decodes into a zero value.
                out = []
                for i, x in enumerate(v):
                    try:
                        out.append(elem(zero(), x))
                    except DecodeError as e:
                        raise e.under(f"[{i}]") from None
                return out
            result = into_slice(cur, v, elem, zero)
            if type(result) is Slice:
                _shortened.count = getattr(_shortened, "count", 0) + 1
            return result
        if v is None:
            return None
        raise mismatch(v, name)

    return dec


def _ptr_decoder(t: Ptr) -> Decoder:
    elem = decoder(t.elem)
    zero = t.elem.zero

    def dec(cur: Any, v: Any) -> Any:
        if v is None:
            return None
        return elem(zero() if cur is None else cur, v)

    return dec


def _map_key(kt: GoType, key: str) -> Any:
    if type(kt) is String:
        return key if key.isascii() else gojson.fix_string(key)
    assert isinstance(kt, Int | Uint)
    n = gojson.parse_int(key, kt.bits) if type(kt) is Int else gojson.parse_uint(key, kt.bits)
    if n is None:
        raise DecodeError(f"cannot unmarshal number {key} into Go value of type {kt.name}").under(
            key_text(key)
        )
    return n


def finished(t: GoType, v: Any) -> Any:
    """A decoded value with every :class:`Slice` cut to its elements (for hashing and use)."""
    if type(t) is Struct:
        if t.unmarshal is not None:
            return v
        for i, f in enumerate(t.fields):
            if not _plain(f.type):
                v[i] = finished(f.type, v[i])
        return v
    if v is None:
        return None
    if type(t) is Map:
        if _plain(t.elem):
            return v
        return {k: finished(t.elem, x) for k, x in v.items()}
    if type(t) is SliceType:
        items = elements(v)
        assert items is not None
        if _plain(t.elem):
            return items
        return [finished(t.elem, x) for x in items]
    if type(t) is Ptr:
        return finished(t.elem, v)
    return v


def _plain(t: GoType) -> bool:
    return type(t) is String or type(t) is Int or type(t) is Uint
