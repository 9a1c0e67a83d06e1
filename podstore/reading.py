"""Streaming, limited reads of a store: ``PodStore.reader()`` and ``PodStore.stream()``.

A :class:`Reader` is one read-only snapshot of the store's committed state on a connection of
its own — the guarded connection of ``sqlite/guarded.py`` (``mode=ro``, ``query_only``, an
authorizer that allows only reading) — optionally with a time limit and a row limit. Its
statements stream: rows come page by page from SQLite's cursor as the caller iterates, so a
caller that handles one row at a time holds one page, however large the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from podstore.rules import validate
from podstore.rules.times import TimeArg, parse_time
from podstore.sqlite.connection import ConnectOptions
from podstore.sqlite.guarded import Guarded, Limits, Params, RowStream
from podstore.storage import audit, events
from podstore.storage.sql import audit as audit_sql
from podstore.storage.sql import events as events_sql
from podstore.types import AllocationEvent, DeviceHolding, DeviceOwner, PodSummary


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

    def pods(self) -> RowStream[PodSummary]:
        """Every pod in uid order, with its container, entry and distinct device counts and
        its resources (``podstore pods``)."""
        return self._guarded.rows(audit_sql.PODS).mapped(audit.pod_summary)

    def devices(self, resource: str | None = None) -> Iterator[DeviceHolding]:
        """Every held device once per holder, then the registered devices nobody holds,
        resource by resource, devices in id order (``podstore devices``); ``resource`` keeps
        one. Streamed: one device's holders are held at a time. Raises InvalidInputError for a
        bad argument."""
        if resource is not None:
            resource = validate.text(resource, "resource")
        return audit.device_holdings(self._guarded.rows, resource)

    def owners(self, device_id: str) -> RowStream[DeviceOwner]:
        """The containers holding ``device_id`` now, in any resource, sorted (``podstore
        owners``). Raises InvalidInputError for a bad argument."""
        device = validate.text(device_id, "device_id")
        return self._guarded.rows(audit_sql.OWNERS_NOW, {"device": device}).mapped(
            audit.device_owner
        )

    def containers(self, pod_uid: str) -> RowStream[str]:
        """The names of ``pod_uid``'s containers, sorted (none for an unknown pod). Raises
        InvalidInputError for a bad argument."""
        pod = validate.text(pod_uid, "pod_uid")
        return self._guarded.rows(audit_sql.CONTAINERS_OF_POD, (pod,)).mapped(_first)

    def close(self) -> None:
        """End the snapshot and close its connection (open streams end too)."""
        self._guarded.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]
