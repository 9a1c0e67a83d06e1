"""The CPU v4 and memory v3 files as kubelet writes them: an older version's copy of the
state, then ``"checksum":N,"data":"…","dataChecksum":N``. Kubelet decodes the copy (a type
error there fails the read) and ignores it; ``data`` holds the state, and ``dataChecksum`` is
FNV-1a 32 of ``"(string)"`` + ``data``, always computed here over the whole string. The copy
is checked by text: its members must be, character for character, the leading members of
``data``, which the same Go types decode (so they decode there too).
"""

from __future__ import annotations

from dataclasses import dataclass

from podstore.checkpoint import spew
from podstore.checkpoint.gojson import fix_string
from podstore.checkpoint.gotypes import CHECKSUM
from podstore.storage.node.members import Refused, expect, go_value, scan_string, scan_value


@dataclass(frozen=True, slots=True)
class DataFile:
    """The parts of a CPU v4 / memory v3 file outside its older copy: ``data`` as Go decodes
    it, the stored ``dataChecksum``, and where the copy ends (``copy_end``)."""

    data: str
    stored: int
    copy_end: int


TAIL = ',"checksum":'


def data_file(text: str) -> DataFile:
    """Split a CPU v4 / memory v3 file as kubelet writes it: ``{<copy>,"checksum":N,"data":
    "…","dataChecksum":N}``. The copy itself is checked later (:func:`check_copy`)."""
    expect(text, 0, '{"policyName":')
    # Within a JSON string every quote is escaped, so ',"' cannot be in data: the last
    # ',"checksum":' is the top-level one, or the layout is another and the scan says so.
    end = text.rfind(TAIL)
    if end < 0:
        raise Refused
    value, pos = scan_value(text, end + len(TAIL))
    go_value(CHECKSUM, 0, value)
    raw, pos = scan_string(text, expect(text, pos, ',"data":'))
    data = raw if raw.isascii() else fix_string(raw)
    value, pos = scan_value(text, expect(text, pos, ',"dataChecksum":'))
    stored: int = go_value(CHECKSUM, 0, value)
    if expect(text, pos, "}") != len(text) or not data:
        raise Refused
    if spew.checksum_string(data) != stored:
        raise Refused  # the full decoder raises the mismatch
    return DataFile(data, stored, end)


def check_copy(text: str, found: DataFile, bounds: list[int]) -> None:
    """The older copy (``text[:copy_end]``) must be ``data``'s leading members, character for
    character: ``bounds`` are where ``data``'s top-level members end. The copy's struct gives
    those keys the same Go types as ``data``'s (or ignores them), so what decoded in
    ``data`` decodes there."""
    end = found.copy_end
    if end not in bounds or not found.data.startswith(text[:end]):
        raise Refused
