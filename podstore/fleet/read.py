"""Reading the fleet database: the stores it holds, who holds a device, read-only SQL, and the
central re-check of every store's hash chain.

``stream`` (``podstore fleet sql``) runs one statement so that PostgreSQL itself refuses
anything but reading: in a ``READ ONLY`` transaction with a statement timeout, after ``SET
LOCAL ROLE`` to a reader role (``podstore fleet grant-reader``: SELECT on the fleet's
relations and nothing else), as the query of a server-side cursor (so one statement only, and
only a query), streamed from it page by page.
"""

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

NODES_COLUMNS = (
    "node",
    "store_id",
    "last_seq",
    "last_shipped_at",
    "events",
    "entries",
    "device_rows",
    "snapshots",
    "refusals",
    "last_refusal",
    "retired_at",
)
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
VERIFY_COLUMNS = (
    "node",
    "store_id",
    "last_seq",
    "events",
    "chained",
    "first_broken_seq",
    "problem",
)


@functools.lru_cache(maxsize=32)
def _driver_sql(sql: str, dialect: Dialect) -> str:
    """podstore's statement with its ``:name`` parameters in the driver's own style."""
    from sqlalchemy import text

    return str(text(sql).compile(dialect=dialect))


def _read(url: FleetURL, sql: str, params: Mapping[str, Any]) -> QueryResult:
    """A trusted statement (podstore's own) in a READ ONLY transaction, schema checked.

    Rows are fetched by the driver itself, in PostgreSQL's binary format, as plain tuples:
    SQLAlchemy's row objects and the text form of every value cost more than the statement
    (`fleet nodes`: 11,000 rows, 49 ms of which 3 ms on the server; 18 ms this way)."""
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
    """Every store the fleet database holds (retired ones too, with ``retired_at``): node,
    store_id, last_seq, last_shipped_at, its event, entry, device-row and snapshot counts, the
    ships it refused and why the last one was (NODES_COLUMNS), by node name."""
    target = resolve(url)
    return db.retrying(target, lambda: _read(target, q.NODES, {}))


def owners(
    url: str | FleetURL | None,
    device_id: str,
    *,
    node: str | None = None,
    at: TimeArg | None = None,
) -> QueryResult:
    """Who holds ``device_id`` now — or held it at the instant ``at`` — on every node (or on
    ``node``): OWNERS_COLUMNS rows, sorted. A device ID names one device per store: the same
    ID on two nodes is two devices, listed apart. A retired store holds nothing now, and
    answers for instants before its retirement.

    A DRA device is named ``driver/pool/device`` (as the node's ``owners`` takes it): its rows
    are the pods using it through a claim (container None, resource the driver, ``claim`` the
    claim's namespace/name). ``namespace`` and ``pod_name`` are the pod's name as its store
    holds it now (None when it holds none)."""
    target = resolve(url)
    params: dict[str, Any] = {
        "device_id": validate.text(device_id, "device_id"),
        "node": None if node is None else validate.text(node, "node"),
    }
    if at is not None:
        params["at"] = parse_time(at, "at")
    sql = q.OWNERS_NOW if at is None else q.OWNERS_AT
    return db.retrying(target, lambda: _read(target, sql, params))


def verify(url: str | FleetURL | None, *, node: str | None = None) -> QueryResult:
    """Re-check every store's hash chain (or those of ``node``) from what the fleet holds:
    VERIFY_COLUMNS rows, one per store; ``problem`` is None for a sound store, else what is
    wrong at ``first_broken_seq`` (docs/fleet.md, "Trust model")."""
    target = resolve(url)
    params = {"node": None if node is None else validate.text(node, "node")}
    return db.retrying(target, lambda: _read(target, q.VERIFY, params))


class Rows:
    """The rows of a ``fleet sql`` statement, fetched from its server-side cursor as they are
    iterated (``columns`` names them). Iterate once, inside the ``stream`` block."""

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
            # The timeout counts for the whole statement, every fetch and every pause between
            # them: each fetch may run only what is left of it (the server stops it there).
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


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _enter_reader(conn: sqlalchemy.Connection, url: FleetURL, reader: str) -> None:
    """Make the transaction's statements run as ``reader``, or refuse (see :func:`stream`)."""
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
    conn.exec_driver_sql(q.SET_ROLE.format(role=_quote_ident(reader)))


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
    """Run one SQL query with PostgreSQL refusing anything but reading, and stream its rows:
    ``with stream(url, "SELECT ...") as rows: for row in rows: ...``.

    The statement runs in a READ ONLY transaction, each fetch within ``timeout`` seconds,
    after ``SET LOCAL ROLE reader_role`` (``podstore fleet grant-reader``), as the query of a
    server-side cursor: one query only (SELECT, VALUES, TABLE, WITH ...), no COPY, no LOCK,
    no second statement. Refused (FleetError) when the URL's role is a superuser — or reaches
    the server's files, programs, sessions or state — and the reader role does not exist or could
    switch back with set_config(); an ordinary role without a reader role runs the query with
    its own rights, still read-only. ``:name`` in the text binds ``params[name]``. The
    connection is closed afterwards, never pooled.

    Raises ReadOnlyStoreError or FleetRefusedError for a statement that would write or use a
    right the reader lacks, QueryLimitError past ``max_rows`` rows (while iterating),
    FleetError past the timeout, InvalidInputError for bad SQL or a missing parameter,
    FleetUnavailableError when the server cannot be reached.
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
    """:func:`stream`, its rows collected: the columns and rows of one read-only query."""
    target = resolve(url)

    def run() -> QueryResult:
        with stream(
            target, sql, params, timeout=timeout, max_rows=max_rows, reader_role=reader_role
        ) as rows:
            return QueryResult(rows.columns, list(rows))

    return db.retrying(target, run)
