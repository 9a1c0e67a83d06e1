"""Create and upgrade the central schema: ``podstore fleet init`` and its API.

The Alembic scripts ship as ``podstore.fleet.migrations`` with their own version table
(``fleet_alembic_version``). Each run holds a transaction-scoped advisory lock, so two
``fleet init`` at once migrate once; PostgreSQL DDL is transactional, so a failed upgrade
leaves the previous schema.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podstore.errors import FleetError
from podstore.fleet import db
from podstore.fleet.sql import ADVISORY_LOCK, REVISION, VERSION_TABLE_EXISTS
from podstore.fleet.urls import FleetURL, resolve
from podstore.sqlite.migrate import head_of, scripts_at, scripts_location

if TYPE_CHECKING:
    import sqlalchemy

# An arbitrary constant: the advisory lock id of podstore's fleet migrations.
_LOCK_ID = 0x706F_6473_746F_7265  # "podstore"


@functools.cache
def migrations_dir() -> str:
    return scripts_location("podstore.fleet.migrations", FleetError)


#: The newest revision under fleet/migrations/versions: ``ship`` and the reads check the
#: database against it without loading Alembic (~150 ms per process). Bump it with every new
#: revision; a test pins it to Alembic's head.
HEAD_REVISION = "f0005"


def head_revision() -> str:
    """The newest central schema revision, from the scripts (loads Alembic)."""
    return head_of(scripts_at(migrations_dir()))


def current_revision(conn: sqlalchemy.Connection) -> str | None:
    """The central schema's revision; None when it has none (not initialised, or downgraded
    to base)."""
    from sqlalchemy import text

    if not conn.execute(text(VERSION_TABLE_EXISTS)).scalar():
        return None
    value = conn.execute(text(REVISION)).scalar()
    return None if value is None else str(value)


_checked: set[tuple[int, str]] = set()


def forget_schema(url: FleetURL) -> None:
    """Ask again next time (the schema of ``url`` was just changed)."""
    _checked.discard((os.getpid(), url.url))


def check_schema(conn: sqlalchemy.Connection, url: FleetURL) -> None:
    """Raise FleetError unless the central schema is at this podstore's head revision.

    Once a database passed, this process does not ask again (a watcher ships every few
    seconds; a schema changed under it makes its statements fail instead)."""
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


def _run(url: FleetURL, command: str, target: str) -> InitReport:
    from alembic import command as alembic_command
    from alembic.config import Config
    from sqlalchemy import text

    with db.transaction(url) as conn:
        conn.execute(text(ADVISORY_LOCK), {"id": _LOCK_ID})
        before = current_revision(conn)
        cfg = Config()
        cfg.set_main_option("script_location", migrations_dir())
        cfg.attributes["connection"] = conn
        getattr(alembic_command, command)(cfg, target)
        after = current_revision(conn)
        warnings = owner_warnings(conn)
    forget_schema(url)
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
    """Create the central schema, or upgrade it to the head revision; a database already at
    head is left as it is. Raises FleetUnavailableError, or FleetError when the database
    holds a revision this podstore does not know."""
    return upgrade(url)


def upgrade(url: str | FleetURL | None, revision: str = "head") -> InitReport:
    """Upgrade the central schema to ``revision``."""
    return _run(resolve(url), "upgrade", revision)


def downgrade(url: str | FleetURL | None, revision: str) -> InitReport:
    """Downgrade the central schema to ``revision`` (``base``: remove every fleet table and
    view, and with them every node's shipped history)."""
    return _run(resolve(url), "downgrade", revision)
