"""Instants as the history stores them, and the time arguments the API accepts.

Stored form: UTC, ISO 8601 with microseconds and a ``Z`` (``2026-12-02T10:32:00.000000Z``), so
text order is time order. Arguments accept an aware ``datetime`` (converted to UTC), a naive
one (taken as UTC), a ``date`` (midnight UTC) or an ISO 8601 string (without an offset: UTC).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from podstore.errors import InvalidInputError

#: What the time arguments accept (see the module docstring).
TimeArg = datetime | date | str


def format_ts(value: datetime) -> str:
    """The stored form of an instant: UTC, microseconds, 'Z' (naive means UTC)."""
    if value.tzinfo is UTC:
        # Every history write stamps one of these: skip the conversion and the copy.
        return value.isoformat(timespec="microseconds")[:-6] + "Z"
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def parse_ts(text: str) -> datetime:
    """A stored timestamp as an aware UTC datetime."""
    return datetime.fromisoformat(text)


def parse_time(value: Any, argument: str) -> str:
    """An accepted time argument in stored form. Raises InvalidInputError naming ``argument``."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(
                f"{argument}: {value!r} is not an ISO 8601 time (e.g. 2026-12-02T10:32:00Z)"
            ) from None
    else:
        raise InvalidInputError(
            f"{argument}: expected a datetime or an ISO 8601 string, got {type(value).__name__}"
        )
    try:
        return format_ts(parsed)
    except OverflowError:
        raise InvalidInputError(f"{argument}: {value!r} is out of range in UTC") from None
