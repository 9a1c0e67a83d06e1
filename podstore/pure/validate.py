"""Argument checks shared by the store and the checkpoint codec: bad input never reaches SQL.

Every check raises InvalidInputError whose message starts with the argument's name, and
returns the caller's own object when nothing had to change (a 100,000-entry checkpoint is
then checked without a copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from podstore.errors import InvalidInputError
from podstore.types import DevicesPerNUMA, PodDevicesEntry

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def text(value: Any, argument: str) -> str:
    """A str that SQLite can store as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{argument}: expected str, got {type(value).__name__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(
                f"{argument}: {value!r} is not valid Unicode (lone surrogate)"
            ) from None
    return value


def texts(values: Any, argument: str) -> list[str]:
    """An iterable of str (a bare str is refused: iterating it would yield characters)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidInputError(
            f"{argument}: expected an iterable of str, got {type(values).__name__}"
        )
    return [text(v, f"{argument}[{i}]") for i, v in enumerate(values)]


def go_string(value: object, where: str) -> str:
    """A str as a checkpoint may carry it: lone surrogates allowed (written as U+FFFD)."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    raise InvalidInputError(f"{where} must be a str, not {type(value).__name__}")


def id_list(value: object, where: str, *, storable: bool) -> list[str] | None:
    """A device ID list, or None. ``storable``: the store's rules — a set is accepted (and
    sorted, so the stored order is reproducible) and every ID must be valid Unicode."""
    if value is None:
        return None
    if storable and isinstance(value, (set, frozenset)):
        return sorted(text(d, f"{where} member") for d in value)
    if type(value) is list and all(type(s) is str and (not storable or s.isascii()) for s in value):
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidInputError(
            f"{where} must be a list of str or None, not {type(value).__name__}"
        )
    out = [go_string(s, f"{where}[{j}]") for j, s in enumerate(value)]
    if storable:
        for j, s in enumerate(out):
            text(s, f"{where}[{j}]")
    return out


def numa_map(value: object, where: str, *, storable: bool) -> DevicesPerNUMA | None:
    """A DevicesPerNUMA (NUMA id within int64 → device IDs, a list may be None) or None.

    The one check of a NUMA map, for ``insert`` and restore (``storable=True``, see
    :func:`id_list`) and for the checkpoint encoder (``storable=False``).
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{where} must be a mapping of NUMA id to device IDs, not {type(value).__name__}"
        )
    for numa in value:
        if type(numa) is not int or not INT64_MIN <= numa <= INT64_MAX:
            raise InvalidInputError(f"{where} has NUMA id {numa!r}: it must be an int within int64")
    return _with_checked_lists(value, lambda numa: f"{where}[{numa}]", storable)


def _with_checked_lists(
    mapping: Mapping[Any, Any], where: Callable[[Any], str], storable: bool
) -> dict[Any, list[str] | None]:
    """``mapping`` with every value checked by :func:`id_list`; the caller's own dict when no
    value had to change (a copy otherwise, never the caller's object modified)."""
    out: dict[Any, list[str] | None] = mapping if type(mapping) is dict else dict(mapping)
    for key, ids in list(out.items()):
        # The common case — a list of ASCII str — needs no copy and no message text.
        if type(ids) is list and all(type(s) is str and s.isascii() for s in ids):
            continue
        checked = id_list(ids, where(key), storable=storable)
        if checked is not ids:
            if out is mapping:
                out = dict(out)
            out[key] = checked
    return out


def devices_per_numa(value: Any, argument: str = "devices") -> DevicesPerNUMA | None:
    """The ``devices`` argument of insert (and an entry's ``device_ids`` on restore)."""
    return numa_map(value, argument, storable=True)


def device_sets(value: Any, argument: str) -> dict[str, set[str]]:
    """The accumulator of add/remove_container_allocated_resources: dict[str, set[str]]."""
    if not isinstance(value, dict):
        raise InvalidInputError(
            f"{argument}: expected dict[str, set[str]], got {type(value).__name__}"
        )
    for res, devs in value.items():
        text(res, f"{argument} key")
        if not isinstance(devs, (set, frozenset)):
            raise InvalidInputError(
                f"{argument}[{res!r}]: expected a set of device IDs, got {type(devs).__name__}"
            )
        for d in devs:
            text(d, f"{argument}[{res!r}] member")
    return value


def registered(
    value: Any, argument: str = "registered", *, storable: bool = True
) -> dict[str, list[str] | None] | None:
    """RegisteredDevices: resource → device IDs (a list may be None), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{argument} must be a mapping of resource to device IDs or None, "
            f"not {type(value).__name__}"
        )
    for res in value:
        if type(res) is not str:
            raise InvalidInputError(f"{argument} key {res!r} must be a str")
        if storable:
            text(res, f"{argument} key")
    return _with_checked_lists(value, lambda res: f"{argument}[{res!r}]", storable)


def checkpoint_entries(entries: Any, argument: str) -> list[PodDevicesEntry]:
    """Caller-supplied checkpoint entries (``from_checkpoint_data``), every one checked before
    any is used; names are checked as storable text and each map as :func:`devices_per_numa`.
    """
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise InvalidInputError(f"{argument}: expected an iterable of PodDevicesEntry")
    out: list[PodDevicesEntry] = []
    for i, entry in enumerate(entries):
        where = f"{argument}[{i}]"
        if not isinstance(entry, PodDevicesEntry):
            raise InvalidInputError(
                f"{where}: expected PodDevicesEntry, got {type(entry).__name__}"
            )
        resp = entry.alloc_resp
        if resp is not None and not isinstance(resp, (bytes, bytearray, memoryview)):
            raise InvalidInputError(
                f"{where}.alloc_resp: expected bytes or None, got {type(resp).__name__}"
            )
        out.append(
            PodDevicesEntry(
                text(entry.pod_uid, f"{where}.pod_uid"),
                text(entry.container_name, f"{where}.container_name"),
                text(entry.resource_name, f"{where}.resource_name"),
                devices_per_numa(entry.device_ids, f"{where}.device_ids"),
                None if resp is None else bytes(resp),
            )
        )
    return out
