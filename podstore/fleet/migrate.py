"""Create and upgrade the central schema (``podstore fleet init``): Alembic scripts in
``podstore.fleet.migrations``, run in one transaction under a lock no node or reader role can
hold (docs/fleet.md, "Central schema"); a failed upgrade leaves the previous schema.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podstore.errors import FleetError
from podstore.fleet import db
from podstore.fleet.sql import (
    ADVISORY_LOCK,
    LOCK_HOLDERS,
    LOCK_VERSION_TABLE,
    REVISION,
    VERSION_TABLE_EXISTS,
)
from podstore.fleet.urls import FleetURL, resolve
from podstore.sqlite.migrate import scripts_at, scripts_location

if TYPE_CHECKING:
    import sqlalchemy

# An arbitrary constant: the advisory lock id of podstore's fleet migrations (first run only).
_LOCK_ID = 0x706F_6473_746F_7265  # "podstore"
#: How long ``fleet init`` waits for a lock other than the version table's: a session holding
#: the fleet's tables (a node role may lift its idle timeout) fails it, named, not for ever.
LOCK_TIMEOUT = "1min"


@functools.cache
def migrations_dir() -> str:
    return scripts_location("podstore.fleet.migrations", FleetError)


#: The newest revision under fleet/migrations/versions: ``ship`` and the reads check the
#: database against it without loading Alembic (~150 ms per process). Bump it with every new
#: revision; a test pins it to Alembic's head.
HEAD_REVISION = "f0009"


def head_revision() -> str:
    """The newest central schema revision, from the scripts (loads Alembic)."""
    return str(scripts_at(migrations_dir()).get_current_head())


def current_revision(conn: sqlalchemy.Connection) -> str | None:
    """The central schema's revision; None when not initialised (or downgraded to base)."""
    from sqlalchemy import text

    if not conn.execute(text(VERSION_TABLE_EXISTS)).scalar():
        return None
    value = conn.execute(text(REVISION)).scalar()
    return None if value is None else str(value)


_checked: set[tuple[int, str]] = set()


def check_schema(conn: sqlalchemy.Connection, url: FleetURL) -> None:
    """Raise FleetError unless the central schema is at this podstore's head revision; asked
    once per process and database (a schema changed later makes the statements fail)."""
    key = (os.getpid(), url.url)
    if key in _checked:
        return
    rev = current_revision(conn)
    head = HEAD_REVISION
    if rev == head:
        _checked.add(key)
        return
    if rev is None:
        raise FleetError(
            f"fleet database {url.shown} has no podstore fleet schema; run "
            "`podstore fleet init --url URL` first"
        )
    raise FleetError(
        f"fleet database {url.shown} is at fleet schema revision {rev}, this podstore expects "
        f"{head}; run `podstore fleet init --url URL` (or upgrade podstore)"
    )


def forget_all() -> None:
    """Ask every database again (tests, after disposing of the engines)."""
    _checked.clear()


@dataclass(frozen=True, slots=True)
class InitReport:
    """What :func:`init` found and left: revisions before and after (None: no schema), and
    what is unsafe about the owner (docs/fleet.md, "What the owner needs")."""

    before: str | None
    after: str | None
    warnings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _lock(conn: sqlalchemy.Connection) -> None:
    """Keep other runs out of this transaction: EXCLUSIVE on the version table needs rights no
    node or reader role has, and lets their SELECT through. Any role may take the advisory
    lock that stands in before that table exists, so it is waited for at most LOCK_TIMEOUT."""
    from sqlalchemy import text

    timeout = text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    conn.execute(timeout)
    if not conn.execute(text(VERSION_TABLE_EXISTS)).scalar():
        conn.execute(text(ADVISORY_LOCK), {"id": _LOCK_ID})
    if conn.execute(text(VERSION_TABLE_EXISTS)).scalar():
        # Another run may migrate for minutes: wait for it without a bound.
        conn.execute(text("SET LOCAL lock_timeout = 0"))
        conn.execute(text(LOCK_VERSION_TABLE))
        conn.execute(timeout)


def _run(url: FleetURL, command: str, target: str) -> InitReport:
    from alembic import command as alembic_command
    from alembic.config import Config
    from sqlalchemy import text

    try:
        with db.transaction(url) as conn:
            _lock(conn)
            before = current_revision(conn)
            cfg = Config()
            cfg.set_main_option("script_location", migrations_dir())
            cfg.attributes["connection"] = conn
            getattr(alembic_command, command)(cfg, target)
            after = current_revision(conn)
            warnings = owner_warnings(conn)
    except FleetError as exc:
        if not getattr(exc, "lock_timeout", False):
            raise
        with db.transaction(url) as conn:
            holders = ", ".join(
                f"pid {pid} ({role})" for pid, role in conn.execute(text(LOCK_HOLDERS))
            )
        raise FleetError(
            f"fleet database {url.shown}: fleet init waited {LOCK_TIMEOUT} for a lock and gave "
            "up; nothing was changed. Sessions holding locks on the fleet's tables: "
            f"{holders or 'none now'}. A session that stays in a transaction is ended with "
            "SELECT pg_terminate_backend(pid) (by the role that granted the node, or a "
            "superuser); then run fleet init again"
        ) from None
    _checked.discard((os.getpid(), url.url))  # just changed: asked again next time
    return InitReport(before, after, warnings)


# The shipping functions run with their owner's rights: an owner that can reach the server's
# programs makes every node role's call a step away from them.
_OWNER = """
    SELECT current_user, r.rolsuper, r.rolcreaterole,
           pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'),
           current_setting('server_version_num')::int
    FROM pg_roles r WHERE r.rolname = current_user
"""


def owner_warnings(conn: sqlalchemy.Connection) -> tuple[str, ...]:
    """Why the connection's role should not own the fleet (none: it may)."""
    from sqlalchemy import text

    role, superuser, createrole, programs, version = conn.execute(text(_OWNER)).one()
    if superuser:
        return (
            f"the fleet's owner {role} is a superuser: the shipping functions run with its "
            "rights; own the fleet with an ordinary role",
        )
    if programs:
        return (f"the fleet's owner {role} is a member of pg_execute_server_program",)
    if createrole and version < 160000:
        return (
            f"the fleet's owner {role} has CREATEROLE, which on PostgreSQL 15 and older lets "
            "it grant itself pg_execute_server_program; run grant-node and grant-reader as "
            "another role (or apply their --print-sql)",
        )
    return ()


def init(url: str | FleetURL | None) -> InitReport:
    """Create the central schema or upgrade it to head (at head: left as it is). Raises
    FleetUnavailableError, or FleetError for a revision this podstore does not know."""
    return upgrade(url)


def upgrade(url: str | FleetURL | None, revision: str = "head") -> InitReport:
    """Upgrade the central schema to ``revision``."""
    return _run(resolve(url), "upgrade", revision)


def downgrade(url: str | FleetURL | None, revision: str) -> InitReport:
    """Downgrade the central schema to ``revision`` (``base``: remove every fleet table and
    view, and with them every node's shipped history)."""
    return _run(resolve(url), "downgrade", revision)
