"""Reading the fleet database: the stores it holds, who holds a device, read-only SQL
(:func:`stream`, which PostgreSQL keeps to reading), and the re-check of every hash chain."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from podstore.errors import FleetError, InvalidInputError, QueryLimitError
from podstore.fleet import admin, db, migrate
from podstore.fleet import sql as q
from podstore.fleet.urls import FleetURL, resolve
from podstore.pure import validate
from podstore.pure.times import TimeArg, parse_time
from podstore.types import QueryResult

if TYPE_CHECKING:
    import sqlalchemy
    from sqlalchemy.engine import Dialect

#: Seconds a ``fleet sql`` statement may run (each fetch of its cursor, on the server).
DEFAULT_TIMEOUT = 30.0
#: The role ``fleet sql`` runs statements as (``podstore fleet grant-reader`` creates it).
DEFAULT_READER = "podstore_reader"
#: Rows fetched from the server-side cursor at a time.
FETCH_ROWS = 2000

OWNERS_COLUMNS = (
    "node",
    "store_id",
    "pod_uid",
    "container",
    "resource",
    "namespace",
    "pod_name",
    "claim",
)


@functools.lru_cache(maxsize=32)
def _driver_sql(sql: str, dialect: Dialect) -> str:
    from sqlalchemy import text

    return str(text(sql).compile(dialect=dialect))


def _read(url: FleetURL, sql: str, params: Mapping[str, Any]) -> QueryResult:
    """podstore's own statement in a READ ONLY transaction, schema checked.

    Fetched by the driver in binary as plain tuples: SQLAlchemy's rows cost more than the
    statement (`fleet nodes`, 11,000 rows: 49 ms, 3 of them on the server; 18 ms this way)."""
    from sqlalchemy import text

    with db.transaction(url) as conn:
        conn.execute(text(q.READ_ONLY))
        migrate.check_schema(conn, url)
        driver = conn.connection.driver_connection
        assert driver is not None
        with driver.cursor(binary=True) as cur:
            cur.execute(_driver_sql(sql, conn.dialect), dict(params))
            columns = tuple(d.name for d in cur.description or ())
            return QueryResult(columns, cur.fetchall())


def nodes(url: str | FleetURL | None) -> QueryResult:
    """Every store the fleet holds (retired ones too), by node: the columns of ``fleet nodes``."""
    target = resolve(url)
    return db.retrying(target, lambda: _read(target, q.NODES, {}))


def owners(
    url: str | FleetURL | None,
    device_id: str,
    *,
    node: str | None = None,
    at: TimeArg | None = None,
) -> QueryResult:
    """Who holds ``device_id`` now, or held it at ``at``, on every node (or ``node``):
    OWNERS_COLUMNS rows, sorted; one ID on two nodes is two devices. A retired store holds
    nothing now but answers for instants before its retirement. A DRA device
    (``driver/pool/device``) gives the pods of the claims using it (container None, resource
    the driver, ``claim`` namespace/name)."""
    target = resolve(url)
    params: dict[str, Any] = {
        "device_id": validate.text(device_id, "device_id"),
        "node": None if node is None else validate.text(node, "node"),
    }
    if at is not None:
        params["at"] = parse_time(at, "at")
    sql = q.OWNERS_NOW if at is None else q.OWNERS_AT
    return db.retrying(target, lambda: _read(target, sql, params))


def usage(
    url: str | FleetURL | None,
    *,
    by: str = "namespace",
    since: TimeArg,
    until: TimeArg,
    resource: str | None = None,
) -> QueryResult:
    """Device-seconds and intervals per group (``q.USAGE_GROUPS``) over ``[since, until)``, from
    every live store's allocation intervals: clipped to the window, open ones counted to
    ``until``, shares applied. The kept intervals are caught up with the history held first,
    in a transaction of their own (the read's is READ ONLY). InvalidInputError for an unknown
    group or a bad time."""
    if by not in q.USAGE_GROUPS:
        raise InvalidInputError(f"by must be one of {', '.join(q.USAGE_GROUPS)}, not {by!r}")
    target = resolve(url)
    params: dict[str, Any] = {
        "since": parse_time(since, "since"),
        "until": parse_time(until, "until"),
        "resource": None if resource is None else validate.text(resource, "resource"),
    }
    sql = q.usage_sql(by, resource is not None)
    db.retrying(target, lambda: catch_up(target))
    return db.retrying(target, lambda: _read(target, sql, params))


def catch_up(url: str | FleetURL | None) -> int:
    """Bring the kept intervals (fleet_intervals) up to the history held: the events past each
    live store's mark recomputed, one catch-up at a time, in one transaction. Returns how many
    events it took in."""
    from sqlalchemy import text

    target = resolve(url)
    with db.transaction(target) as conn:
        migrate.check_schema(conn, target)
        return int(conn.execute(text(q.CATCH_UP)).scalar_one())


def verify(url: str | FleetURL | None, *, node: str | None = None) -> QueryResult:
    """Re-check the hash chain of every store (or ``node``'s) from what the fleet holds: one
    row per store; ``problem`` is None when sound, else what is wrong at ``first_broken_seq``."""
    target = resolve(url)
    params = {"node": None if node is None else validate.text(node, "node")}
    return db.retrying(target, lambda: _read(target, q.VERIFY, params))


class Rows:
    """A ``fleet sql`` statement's rows, fetched as iterated; iterate once, inside ``stream``."""

    def __init__(
        self, url: FleetURL, cursor: Any, max_rows: int | None, timeout: float, started: float
    ) -> None:
        self._url = url
        self._cursor = cursor
        self._max_rows = max_rows
        self._timeout = timeout
        self._deadline = started + timeout
        self.columns: tuple[str, ...] = tuple(d.name for d in cursor.description or ())

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        count = 0
        limit = self._max_rows
        while True:
            # The timeout counts over every fetch and pause: each fetch gets what is left.
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise FleetError(
                    f"fleet sql: the statement ran past its timeout of {self._timeout:g} s "
                    "(counted over every fetch and pause) and was stopped; nothing was changed"
                )
            with db.translated(self._url):
                self._cursor.connection.execute(
                    q.STATEMENT_TIMEOUT.format(ms=max(1, int(left * 1000)))
                )
                page = self._cursor.fetchmany(FETCH_ROWS)
            if not page:
                return
            for row in page:
                if limit is not None and count >= limit:
                    raise QueryLimitError(
                        "max_rows",
                        f"the statement returned more than {limit} rows (its row limit) and "
                        "was stopped; nothing was changed",
                    )
                count += 1
                yield tuple(row)


def _enter_reader(conn: sqlalchemy.Connection, url: FleetURL, reader: str) -> None:
    from sqlalchemy import text

    row = conn.execute(text(q.READER_CHECK), {"role": reader}).one()
    session_privileged, exists, reader_privileged, reader_set_config, session = row[:5]
    session_superuser, reader_temp_limit = row[5:]
    hint = f"podstore fleet grant-reader {reader} --url OWNER_URL"
    if not exists:
        if session_privileged:
            raise FleetError(
                f"fleet sql: refused: the URL's role {session} is a superuser (or reaches the "
                f"server's files, programs, sessions or state) and there is no reader role "
                f"{reader} to run the statement as; create it with `{hint}` (or name "
                "another with --reader-role)"
            )
        return  # an ordinary role: its own rights, in a read-only transaction
    if reader_privileged:
        raise FleetError(
            f"fleet sql: refused: the reader role {reader} is a superuser or reaches the "
            "server's files, programs, sessions or state; name a role with SELECT rights only"
        )
    if session_privileged and reader_set_config:
        raise FleetError(
            f"fleet sql: refused: the reader role {reader} may call set_config(), with which "
            f"a statement could switch back to the URL's role {session}; run `{hint}` as a "
            "superuser (it revokes set_config from PUBLIC in the fleet database)"
        )
    if session_superuser:
        # Role settings come with a login, not with SET ROLE: the reader's bound on temporary
        # files is applied here (a superuser setting, so the statement cannot lift it again);
        # a reader without one gets the default of `grant-reader`.
        limit = reader_temp_limit or admin.TEMP_FILE_LIMIT
        conn.execute(text(q.TEMP_FILE_LIMIT), {"limit": limit})
    conn.exec_driver_sql(q.SET_ROLE.format(role=conn.dialect.identifier_preparer.quote(reader)))


@contextmanager
def stream(
    url: str | FleetURL | None,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = None,
    reader_role: str = DEFAULT_READER,
) -> Iterator[Rows]:
    """Stream the rows of one query (``:name`` binds ``params[name]``), PostgreSQL refusing
    anything but reading: a READ ONLY transaction, ``timeout`` over all fetches, ``SET LOCAL
    ROLE reader_role``, one query as a server-side cursor; the connection is never pooled.
    A privileged URL role is refused (FleetError) unless a reader role exists that cannot
    switch back with set_config(); an ordinary role without one reads with its own rights.

    Raises ReadOnlyStoreError or FleetRefusedError for a write or a right the reader lacks,
    QueryLimitError past ``max_rows`` (while iterating), FleetError past the timeout,
    InvalidInputError for bad SQL or a missing parameter, FleetUnavailableError when the
    server cannot be reached.
    """
    from sqlalchemy import text

    target = resolve(url)
    validate.text(sql, "sql")
    reader = validate.text(reader_role, "reader_role")
    if not reader:
        raise InvalidInputError("reader_role: expected a role name")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidInputError(f"timeout: expected positive seconds, got {timeout!r}")
    if max_rows is not None and (
        isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0
    ):
        raise InvalidInputError(f"max_rows: expected an int >= 0 or None, got {max_rows!r}")
    with db.translated(target):
        conn = db.engine(target).connect()
        try:
            conn.begin()
            conn.execute(text(q.READ_ONLY))
            _enter_reader(conn, target, reader)
            started = time.monotonic()
            conn.exec_driver_sql(q.STATEMENT_TIMEOUT.format(ms=max(1, int(timeout * 1000))))
            compiled = text(sql).compile(dialect=conn.dialect)
            try:
                bound = compiled.construct_params(dict(params or {}))
            except Exception as exc:  # a :name with no value
                message = str(exc).split(" (Background on this error")[0]
                raise InvalidInputError(f"fleet sql: {message}") from None
            driver = conn.connection.driver_connection
            assert driver is not None
            # A named cursor: DECLARE ... CURSOR FOR takes one query, sent with the extended
            # protocol, so neither `COMMIT; ...` nor a second statement can follow it.
            with driver.cursor(name="podstore_fleet_sql") as cur:
                cur.execute(str(compiled), bound)
                yield Rows(target, cur, max_rows, timeout, started)
        finally:
            # Never back into the pool: whatever the statement changed stays with the session.
            conn.invalidate()
            conn.close()


def query(
    url: str | FleetURL | None,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = None,
    reader_role: str = DEFAULT_READER,
) -> QueryResult:
    """:func:`stream`, its rows collected."""
    target = resolve(url)

    def run() -> QueryResult:
        with stream(
            target, sql, params, timeout=timeout, max_rows=max_rows, reader_role=reader_role
        ) as rows:
            return QueryResult(rows.columns, list(rows))

    return db.retrying(target, run)
