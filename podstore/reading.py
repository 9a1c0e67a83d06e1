"""Streaming, limited reads of a store: ``PodStore.reader()`` and ``PodStore.stream()``.

A :class:`Reader` is one read-only snapshot of the store's committed state on a connection of
its own — the guarded connection of ``sqlite/guarded.py`` (``mode=ro``, ``query_only``, an
authorizer that allows only reading) — optionally with a time limit and a row limit. Its
statements stream: rows come page by page from SQLite's cursor as the caller iterates, so a
caller that handles one row at a time holds one page, however large the store.
"""

from __future__ import annotations

from typing import Any

from podstore.rules import validate
from podstore.rules.times import TimeArg, parse_time
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.guarded import Guarded, Limits, Params, RowStream
from podstore.storage import events
from podstore.storage.sql import events as events_sql
from podstore.types import AllocationEvent


def history_query(
    pod_uid: str | None = None,
    device_id: str | None = None,
    since: TimeArg | None = None,
    until: TimeArg | None = None,
) -> tuple[str, dict[str, str]]:
    """The history statement and its parameters for these filters (``PodStore.history``).

    Raises InvalidInputError for a bad argument.
    """
    params: dict[str, str] = {}
    if pod_uid is not None:
        params["pod_uid"] = validate.text(pod_uid, "pod_uid")
    if device_id is not None:
        params["device_id"] = validate.text(device_id, "device_id")
    if since is not None:
        params["since"] = parse_time(since, "since")
    if until is not None:
        params["until"] = parse_time(until, "until")
    return events_sql.history_sql(params), params


class Reader:
    """A read-only snapshot of a store, with optional limits; see ``PodStore.reader``.

    Use it in a ``with`` block (or call :meth:`close`). Every statement run through it sees
    the same committed state, whatever writers do meanwhile. Not for use by several threads
    at once.
    """

    def __init__(self, options: ConnectOptions, limits: Limits, *, snapshot: bool = True) -> None:
        self._guarded = Guarded(options, limits, snapshot=snapshot)

    @property
    def timeout(self) -> float | None:
        return self._guarded.limits.timeout

    @property
    def max_rows(self) -> int | None:
        return self._guarded.limits.max_rows

    def stream(self, sql: str, params: Params = None) -> RowStream[tuple[Any, ...]]:
        """The rows of one read-only statement, streamed (``.columns`` names them).

        Raises ReadOnlyStoreError for a statement that would write, InvalidInputError for bad
        SQL or parameters, QueryLimitError (also while iterating) past a limit.
        """
        return self._guarded.rows(sql, params)

    def history(
        self,
        pod_uid: str | None = None,
        device_id: str | None = None,
        since: TimeArg | None = None,
        until: TimeArg | None = None,
    ) -> RowStream[AllocationEvent]:
        """``PodStore.history`` streamed: the same events, oldest first, one page at a time."""
        sql, params = history_query(pod_uid, device_id, since, until)
        return self._guarded.rows(sql, params).mapped(events.to_event)

    def close(self) -> None:
        """End the snapshot and close its connection (open streams end too)."""
        self._guarded.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
