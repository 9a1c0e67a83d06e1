"""``json.Marshal`` of a Go value of :mod:`.gotypes`, as a JSON-ready value for
:func:`.gojson.encode`: fields in declaration order, empty ``omitempty`` fields dropped, map
keys sorted by their text (integers by their decimal form: ``"-1","0","1","10","2"``).
"""

from __future__ import annotations

from typing import Any

from podstore.checkpoint.gotypes import GoType, Int, Map, Ptr, Slice, String, Struct, Uint


def to_json(t: GoType, v: Any) -> Any:
    """The JSON value Go writes for ``v`` of type ``t`` (dicts in Go's key order)."""
    kind = type(t)
    if kind is String or kind is Int or kind is Uint:
        return v
    if kind is Struct:
        assert isinstance(t, Struct)
        out: dict[str, Any] = {}
        for f, x in zip(t.fields, v, strict=True):
            if f.omitempty and _empty(f.type, x):
                continue
            out[f.key] = to_json(f.type, x)
        return out
    if v is None:
        return None
    if kind is Ptr:
        assert isinstance(t, Ptr)
        return to_json(t.elem, v)
    if kind is Map:
        assert isinstance(t, Map)
        keys = sorted(v, key=str) if type(t.key) is not String else sorted(v)
        return {str(k): to_json(t.elem, v[k]) for k in keys}
    if kind is Slice:
        assert isinstance(t, Slice)
        return [to_json(t.elem, x) for x in v]
    raise TypeError(f"no encoding for {t!r}")  # pragma: no cover - the schemas are fixed


def _empty(t: GoType, v: Any) -> bool:
    if type(t) is Struct:
        return False
    return v is None or v == "" or v == 0 or (isinstance(v, dict | list) and not v)
