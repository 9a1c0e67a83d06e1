"""Argument checks shared by the public methods: bad input never reaches SQL."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from podstore.errors import InvalidInputError
from podstore.types import DevicesPerNUMA

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def text(value: Any, argument: str) -> str:
    """A str that SQLite can store as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{argument}: expected str, got {type(value).__name__}")
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


def numa_id(value: Any, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{argument}: NUMA id must be int, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidInputError(f"{argument}: NUMA id {value} is outside int64")
    return value


def id_list(ids: Any, where: str) -> list[str]:
    """A list of device IDs. A set is accepted and sorted, so stored order is reproducible."""
    if isinstance(ids, (set, frozenset)):
        checked = [text(d, f"{where} member") for d in ids]
        return sorted(checked)
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidInputError(f"{where}: expected a list of device IDs, got {type(ids).__name__}")
    return [text(d, f"{where}[{i}]") for i, d in enumerate(ids)]


def devices_per_numa(value: Any, argument: str = "devices") -> DevicesPerNUMA | None:
    """A DevicesPerNUMA (NUMA id → device IDs, a list may be None) or None, copied."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{argument}: expected a mapping of NUMA id to device IDs, got {type(value).__name__}"
        )
    out: DevicesPerNUMA = {}
    for key, ids in value.items():
        node = numa_id(key, f"{argument} key {key!r}")
        where = f"{argument}[{node}]"
        if ids is None:
            out[node] = None
            continue
        out[node] = id_list(ids, where)
    return out


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


def registered(value: Any, argument: str = "registered") -> dict[str, list[str] | None] | None:
    """RegisteredDevices: resource → device IDs (a list may be None), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{argument}: expected a mapping of resource to device IDs, got {type(value).__name__}"
        )
    out: dict[str, list[str] | None] = {}
    for res, ids in value.items():
        name = text(res, f"{argument} key")
        if ids is None:
            out[name] = None
        else:
            out[name] = id_list(ids, f"{argument}[{name!r}]")
    return out
