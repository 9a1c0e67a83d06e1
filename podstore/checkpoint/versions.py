"""Reading a checkpoint that several versions of a kubelet struct may have written.

The CPU, memory and first DRA formats carry no version field: kubelet decodes into its newest
struct, verifies, and on failure tries the older ones in turn; :func:`first_verified` does the
same over :class:`Layout` s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.decode import parse
from podstore.checkpoint.files import DEFAULT_MAX_BYTES, read_source
from podstore.checkpoint.godecode import DecodeError, decode_value
from podstore.checkpoint.gotypes import CHECKSUM, STRING, Field, Struct
from podstore.errors import CheckpointCorruptError, CheckpointFormatError

#: A checksum rule: the checksum of a decoded value whose ``Checksum`` field is zero.
Rule = Callable[[list[Any]], int]


@dataclass(frozen=True)
class Layout:
    """One version of a checkpoint struct: kubelet's value before decoding (``initial``), the
    checksum rules kubelets verified it with (the one kubelet writes first), whether a stored
    0 is accepted unverified, and whether a failing file is described as this version."""

    label: str
    type: Struct
    initial: Callable[[], list[Any]]
    rules: Sequence[tuple[str, Rule]]
    accepts_zero: bool = False
    fits: Callable[[Any], bool] = lambda tree: True
    #: when the layout before this one decoded the file, this one's value made from it (for a
    #: version whose struct is the newer one's minus fields: the same keys decode the same)
    from_newer: Callable[[list[Any]], list[Any]] | None = None


@dataclass(frozen=True)
class Verified:
    """The layout a file verified under, its decoded value, the stored checksum and the rule
    that matched it (``None`` when a checksum of 0 was accepted unverified)."""

    layout: Layout
    value: list[Any]
    checksum: int
    rule: str | None


def spew_rule(t: Struct, hashed_as: str) -> tuple[str, Rule]:
    """The whole-struct rule of ``t`` with the Go type name ``hashed_as`` in the hashed text:
    kubelet renames its versioned types (``…V3``) to the name the checksum was first computed
    under, or hashes the versioned name itself."""
    own = t.name.split(".", 1)[1]
    renames = [] if own == hashed_as else [(own, hashed_as)]
    return hashed_as, lambda value: spew.checksum_value(t, value, renames)


#: The two fields of the 2026 formats (CPU v4, memory v3), after the older struct's.
DATA_FIELDS = (Field("Data", STRING, "data"), Field("DataChecksum", CHECKSUM, "dataChecksum"))


def read_tree(
    source: str | os.PathLike[str] | bytes, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Any, str]:
    """A checkpoint (path or bytes) parsed, and the prefix of its error messages."""
    text, origin = read_source(source, max_bytes)
    return parse(text, origin), origin


def decode_layout(layout: Layout, tree: Any) -> list[Any]:
    """The value kubelet decodes ``tree`` into for this layout (raises ``DecodeError``)."""
    return decode_value(layout.type, layout.initial(), tree)  # type: ignore[no-any-return]


def first_verified(tree: Any, layouts: Sequence[Layout], what: str, origin: str) -> Verified:
    """The first layout (newest first) ``tree`` decodes into and verifies under; ``what``
    names the file in messages (``"cpu manager"``).

    Raises :class:`CheckpointCorruptError` when some layout decodes but no rule verifies
    (computed by the newest layout the file fits), else :class:`CheckpointFormatError` with
    the newest layout's decoding error.
    """
    decode_errors: list[tuple[Layout, DecodeError]] = []
    mismatches: list[tuple[Layout, int, int]] = []
    newer: list[Any] | None = None
    for layout in layouts:
        if newer is not None and layout.from_newer is not None:
            value = layout.from_newer(newer)
        else:
            try:
                value = decode_layout(layout, tree)
            except DecodeError as e:
                decode_errors.append((layout, e))
                newer = None
                continue
        newer = value
        stored: int = value[-1]
        if stored == 0 and layout.accepts_zero:
            return Verified(layout, value, 0, None)
        # Kubelet zeroes the Checksum field before hashing the struct (a copy: the next
        # layout may be made from this value).
        zeroed = [*value[:-1], 0]
        actuals = []
        for name, rule in layout.rules:
            actual = rule(zeroed)
            if actual == stored:
                return Verified(layout, value, stored, name)
            actuals.append(actual)
        mismatches.append((layout, stored, actuals[0]))
    tried = ", ".join(layout.label for layout in layouts)
    if mismatches:
        fitting = [m for m in mismatches if m[0].fits(tree)] or mismatches
        layout, stored, actual = fitting[0]
        raise CheckpointCorruptError(
            stored,
            actual,
            f"{origin}{what} checkpoint is corrupted: stored checksum {stored}, computed "
            f"{actual} (format {layout.label}; no rule of {tried} matches)",
        )
    layout, error = decode_errors[0]
    raise CheckpointFormatError(f"{origin}not a {what} checkpoint ({layout.label}): {error}")


def read_data_format(
    tree: Any, outer: Layout, inner: Layout, what: str, origin: str
) -> tuple[list[Any], int]:
    """The decoded ``data`` and stored checksum of a 2026 format (CPU v4, memory v3): the
    file decoded as ``outer`` (ending in ``data``, ``dataChecksum``), ``data`` as ``inner``,
    then verified; no fallback to older formats, as in kubelet."""
    label = outer.label
    try:
        value = decode_layout(outer, tree)
    except DecodeError as e:
        raise CheckpointFormatError(f"{origin}not a {what} checkpoint ({label}): {e}") from None
    data, stored = value[-2], value[-1]
    try:
        state = decode_layout(inner, gojson.parse(data))
    except (DecodeError, gojson.JSONSyntaxError) as e:
        raise CheckpointFormatError(f"{origin}{what} checkpoint data ({label}): {e}") from None
    actual = spew.checksum_string(data)
    if actual != stored:
        raise CheckpointCorruptError(
            stored,
            actual,
            f"{origin}{what} checkpoint is corrupted: stored dataChecksum {stored}, computed "
            f"{actual} (format {label}; kubelet does not fall back to older formats)",
        )
    return state, stored


def has_key(tree: Any, folded: str) -> bool:
    """Whether the top-level object has a key Go matches to the field ``folded`` (upper case)."""
    return type(tree) is tuple and any(gojson.fold_name(k) == folded for k, _ in tree)


def string_field(tree: Any, folded: str) -> str:
    """The value Go leaves in a top-level string field after decoding (``""``: none)."""
    out = ""
    if type(tree) is tuple:
        for k, v in tree:
            if type(v) is str and gojson.fold_name(k) == folded:
                out = gojson.fix_string(v)
    return out


def uint_field(tree: Any, folded: str, bits: int = 64) -> int:
    """The value Go leaves in a top-level unsigned field after decoding ``tree`` (0: none)."""
    out = 0
    if type(tree) is tuple:
        for k, v in tree:
            if type(v) is gojson.Int and gojson.fold_name(k) == folded:
                n = gojson.parse_uint(v, bits)
                if n is not None:
                    out = n
    return out
