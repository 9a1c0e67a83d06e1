"""Reading the fleet database: the stores it holds, who holds a device, read-only SQL.

``query`` is ``podstore fleet sql``: one statement in a ``READ ONLY`` transaction with a
statement timeout, so an audit can neither change the fleet's data nor run away with the
server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podstore.errors import InvalidInputError
from podstore.fleet import db, migrate
from podstore.fleet import sql as q
from podstore.fleet.urls import FleetURL, resolve
from podstore.rules import validate
from podstore.rules.times import TimeArg, parse_time
from podstore.types import QueryResult

#: Seconds a ``fleet sql`` statement may run.
DEFAULT_TIMEOUT = 30.0

NODES_COLUMNS = (
    "node",
    "store_id",
    "last_seq",
    "last_shipped_at",
    "events",
    "entries",
    "device_rows",
    "snapshots",
)
OWNERS_COLUMNS = ("node", "store_id", "pod_uid", "container", "resource")


def _read_only(
    url: FleetURL, sql: str, params: Mapping[str, Any], timeout: float, *, untrusted: bool = False
) -> QueryResult:
    """Run ``sql`` in a READ ONLY transaction with a statement timeout.

    ``untrusted`` (``fleet sql``): the text is sent as a prepared statement, which PostgreSQL
    accepts for one statement only (a ``COMMIT; DELETE ...`` would otherwise run the second
    part outside the read-only transaction), and the connection is closed afterwards rather
    than pooled, so a ``SET`` it ran cannot reach a later caller.
    """
    from sqlalchemy import text

    if not untrusted:
        with db.transaction(url) as conn:
            conn.execute(text(q.READ_ONLY))
            conn.execute(text(q.STATEMENT_TIMEOUT), {"ms": str(max(1, int(timeout * 1000)))})
            result = conn.execute(text(sql), dict(params))
            return QueryResult(tuple(result.keys()), [tuple(r) for r in result])
    with db.translated(url):
        conn = db.engine(url).connect()
        try:
            conn.begin()
            conn.execute(text(q.READ_ONLY))
            conn.execute(text(q.STATEMENT_TIMEOUT), {"ms": str(max(1, int(timeout * 1000)))})
            compiled = text(sql).compile(dialect=conn.dialect)
            try:
                bound = compiled.construct_params(dict(params))
            except Exception as exc:  # a :name with no value
                message = str(exc).split(" (Background on this error")[0]
                raise InvalidInputError(f"fleet sql: {message}") from None
            driver = conn.connection.driver_connection
            assert driver is not None
            with driver.cursor() as cur:
                cur.execute(str(compiled), bound, prepare=True)
                if cur.description is None:
                    return QueryResult((), [])
                columns = tuple(d.name for d in cur.description)
                rows = [tuple(r) for r in cur.fetchall()]
            return QueryResult(columns, rows)
        finally:
            # Never back into the pool: whatever the statement SET stays with the session.
            conn.invalidate()
            conn.close()


def _checked_read(url: FleetURL, sql: str, params: Mapping[str, Any]) -> QueryResult:
    with db.transaction(url) as conn:
        migrate.check_schema(conn, url)
    return _read_only(url, sql, params, DEFAULT_TIMEOUT)


def nodes(url: str | FleetURL | None) -> QueryResult:
    """Every store the fleet database holds: node, store_id, last_seq, last_shipped_at, and
    its event, entry, device-row and snapshot counts (NODES_COLUMNS), by node name."""
    target = resolve(url)
    return db.retrying(target, lambda: _checked_read(target, q.NODES, {}))


def owners(
    url: str | FleetURL | None,
    device_id: str,
    *,
    node: str | None = None,
    at: TimeArg | None = None,
) -> QueryResult:
    """Who holds ``device_id`` now — or held it at the instant ``at`` — on every node (or on
    ``node``): OWNERS_COLUMNS rows, sorted. A device ID names one device per store: the same
    ID on two nodes is two devices, listed apart."""
    target = resolve(url)
    params: dict[str, Any] = {
        "device_id": validate.text(device_id, "device_id"),
        "node": None if node is None else validate.text(node, "node"),
    }
    if at is not None:
        params["at"] = parse_time(at, "at")
    sql = q.OWNERS_NOW if at is None else q.OWNERS_AT
    return db.retrying(target, lambda: _checked_read(target, sql, params))


def query(
    url: str | FleetURL | None,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> QueryResult:
    """Run one SQL statement in a READ ONLY transaction that may take ``timeout`` seconds;
    returns its columns and rows. ``:name`` in the text binds ``params[name]``.

    Raises ReadOnlyStoreError for any statement that writes, FleetError when it runs past the
    timeout, InvalidInputError for bad SQL or a missing parameter, FleetUnavailableError when
    the server cannot be reached.
    """
    target = resolve(url)
    validate.text(sql, "sql")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidInputError(f"timeout: expected positive seconds, got {timeout!r}")
    return db.retrying(
        target, lambda: _read_only(target, sql, params or {}, float(timeout), untrusted=True)
    )
