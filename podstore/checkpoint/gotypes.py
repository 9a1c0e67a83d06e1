"""The Go types of the node's checkpoint files, described once for ``json.Unmarshal``, go-spew
and ``json.Marshal``.

Go values are plain Python values: strings ``str``, integers ``int``, a struct a ``list`` of
its fields in declaration order, a map a ``dict``, a slice a ``list``, a pointer the value it
points to; ``None`` for nil.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint.gojson import fold_name


@dataclass(frozen=True, eq=False)
class GoType:
    """A Go type; ``name`` is what ``reflect.Type.String()`` returns (``state.Block``)."""

    name: str

    def zero(self) -> Any:
        """The zero value, as held in Python."""
        return None


@dataclass(frozen=True, eq=False)
class String(GoType):
    """A type of kind string (``string``, ``types.UID``, ``v1.ResourceName``)."""

    def zero(self) -> Any:
        return ""


@dataclass(frozen=True, eq=False)
class Int(GoType):
    """A signed integer type of ``bits`` bits (Go's ``int`` is 64 bits on kubelet's platforms)."""

    bits: int = 64

    def zero(self) -> Any:
        return 0


@dataclass(frozen=True, eq=False)
class Uint(GoType):
    """An unsigned integer type of ``bits`` bits (``uint64``, ``checksum.Checksum``)."""

    bits: int = 64

    def zero(self) -> Any:
        return 0


@dataclass(frozen=True, eq=False)
class Field:
    """A struct field: Go name (go-spew prints it), JSON key, type, ``omitempty``."""

    name: str
    type: GoType
    json: str = ""
    omitempty: bool = False

    @property
    def key(self) -> str:
        return self.json or self.name


#: A decoding hook for a type with its own ``UnmarshalJSON``: (current value, JSON value) →
#: new value; raises ``DecodeError``.
Unmarshal = Callable[[Any, Any], Any]


@dataclass(frozen=True, eq=False)
class Struct(GoType):
    fields: tuple[Field, ...] = ()
    #: set when the type implements ``json.Unmarshaler`` (it then gets the raw value, null too)
    unmarshal: Unmarshal | None = None
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    # A struct whose fields all have immutable zero values (strings, numbers, nil) is copied
    # from this list instead of being rebuilt field by field.
    _zero: list[Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # Go matches a key to a field by exact name first, then case-insensitively; the folded
        # name (upper case, ASCII) stands for the second look-up.
        for i, f in enumerate(self.fields):
            self._index.setdefault(f.key, i)
            self._index.setdefault(f.key.upper(), i)
        zeros = [f.type.zero() for f in self.fields]
        if all(z is None or type(z) in (str, int) for z in zeros):
            object.__setattr__(self, "_zero", zeros)

    def zero(self) -> Any:
        template = self._zero
        if template is not None:
            return template.copy()
        return [f.type.zero() for f in self.fields]

    def field_index(self, key: str) -> int | None:
        """The field a JSON object key decodes into (``None``: Go ignores the key)."""
        idx = self._index.get(key)
        if idx is None:
            folded = fold_name(key)
            if folded is not None:
                idx = self._index.get(folded)
        return idx


@dataclass(frozen=True, eq=False)
class Map(GoType):
    key: GoType = String("string")
    elem: GoType = String("string")


@dataclass(frozen=True, eq=False)
class Slice(GoType):
    elem: GoType = String("string")


@dataclass(frozen=True, eq=False)
class Ptr(GoType):
    elem: GoType = String("string")


def ptr(elem: GoType) -> Ptr:
    return Ptr("*" + elem.name, elem)


def slice_of(elem: GoType) -> Slice:
    return Slice("[]" + elem.name, elem)


def map_of(key: GoType, elem: GoType, name: str | None = None) -> Map:
    return Map(name or f"map[{key.name}]{elem.name}", key, elem)


STRING = String("string")
INT = Int("int")
UINT64 = Uint("uint64")
UINT32 = Uint("uint32", 32)
CHECKSUM = Uint("checksum.Checksum")
EMPTY = Struct("struct {}")
