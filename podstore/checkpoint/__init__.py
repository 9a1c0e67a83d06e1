"""Kubelet's device-manager checkpoint file (``kubelet_internal_checkpoint``), read and written
exactly as kubelet does, independent of any store.

- :func:`read_checkpoint` decodes with Go ``encoding/json`` rules, verifies the checksum and
  falls back to the legacy v1 format like kubelet 1.23–1.29.
- :func:`dumps_checkpoint` produces the bytes kubelet's encoder writes;
  :func:`write_checkpoint_file` puts them on disk atomically.
- :func:`checksum` and :func:`render_spew` expose kubelet's checksum and the text it hashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podstore.checkpoint import spew, values
from podstore.checkpoint.decode import Checkpoint
from podstore.checkpoint.encode import dumps_checkpoint
from podstore.checkpoint.files import (
    DEFAULT_MAX_BYTES,
    read_checkpoint,
    write_checkpoint_file,
)
from podstore.errors import CheckpointNotFoundError, InvalidInputError
from podstore.types import PodDevicesEntry

__all__ = [
    "DEFAULT_MAX_BYTES",
    "Checkpoint",
    "CheckpointNotFoundError",
    "checksum",
    "dumps_checkpoint",
    "read_checkpoint",
    "render_spew",
    "write_checkpoint_file",
]


def _prepared(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    version: int,
) -> tuple[values.Entries, values.Registered]:
    if version not in (1, 2):
        raise InvalidInputError(f"version must be 1 or 2, not {version!r}")
    checked = values.sanitize(*values.normalize(entries, registered_devices))
    if version == 1:
        for i, e in enumerate(checked[0] or ()):
            if e.device_ids is not None and list(e.device_ids) != [0]:
                raise InvalidInputError(
                    f"entries[{i}].device_ids: a v1 entry has all its devices under NUMA 0 "
                    f"(device_ids={{0: [...]}} or None), not NUMA ids {sorted(e.device_ids)}"
                )
    return checked


def checksum(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    *,
    version: int = 2,
) -> int:
    """Kubelet's checksum of these values (the ``Checksum`` a file holding them must carry).

    ``None`` stands for JSON ``null`` (Go nil), which hashes differently from ``[]`` / ``{}``;
    list order matters. With ``version=1`` the legacy rule is used and each entry's
    ``device_ids`` must be ``{0: ids}`` or ``None`` (the form :func:`read_checkpoint` gives v1
    entries); ``ids`` is hashed as v1's flat list. Lone surrogates count as U+FFFD, as kubelet
    would decode them.

    Raises :class:`InvalidInputError` for values of the wrong type or shape.
    """
    return spew.checksum_of(*_prepared(entries, registered_devices, version), version)


def render_spew(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    *,
    version: int = 2,
) -> str:
    """The exact text kubelet hashes for these values (go-spew ``%#v`` of ``Data.Data``).

    Same arguments and errors as :func:`checksum`; useful to diff against a known rendering.
    """
    return spew.render(*_prepared(entries, registered_devices, version), version).decode("utf-8")
