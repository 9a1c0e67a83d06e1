"""Round 3 of trust: a node role's transaction does not outlive a bound.

Revision ID: f0006
Revises: f0005
Create Date: 2026-12-06

A node role may lift its own timeouts (they are user-settable) and keep a transaction open
for ever after a shipping call, holding its store's row, table locks that stop ``fleet
init``'s DDL, and the vacuum horizon. PostgreSQL cannot forbid the ``SET``; so every
shipping call (``fleet_ship_lock``, behind all three entry points) first ends the sessions of
node roles whose transaction began more than :data:`STALE_AFTER` ago (a ship's transaction
lasts seconds: one batch, or one snapshot). It ends only
sessions it may end: those of roles whose rights the fleet's owner has (``grant-node`` makes
the granting role a member of the node role).

``fleet_ship_lock`` is f0005's text with one statement spliced in (CREATE OR REPLACE, same
signature and grants).
"""

from __future__ import annotations

from collections.abc import Sequence

from podstore.fleet.migrations.versions import f0002_trust as f0002
from podstore.fleet.migrations.versions import f0003_node_state as f0003
from podstore.fleet.migrations.versions import f0005_hostile_node as f0005

revision: str = "f0006"
down_revision: str | None = "f0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STALE_AFTER = "10 minutes"
_END = "fleet_end_stale_node_sessions(interval)"

_END_FUNCTION = """
CREATE FUNCTION fleet_end_stale_node_sessions(p_older_than interval)
RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, @SCHEMA@, pg_temp
AS $fn$
    -- now() is when the calling transaction began. The owner may end a session only of a
    -- role whose rights it has, and sees its xact_start only then. Chosen first, ended after:
    -- the planner may evaluate a WHERE's conditions in any order.
    WITH stale AS MATERIALIZED (
        SELECT a.pid
        FROM pg_stat_activity a
        WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
          AND a.xact_start < now() - p_older_than
          AND a.usename IN (SELECT g.role_name FROM fleet_node_grants g)
          AND pg_has_role(a.usesysid, 'USAGE')
    )
    SELECT CAST(count(*) FILTER (WHERE pg_terminate_backend(s.pid)) AS integer) FROM stale s
$fn$
"""


def _lock() -> str:
    return f0003._splice(
        f0005._lock(),
        "BEGIN\n",
        f"""BEGIN
    -- A node role may lift its own timeouts: no node's transaction outlives {STALE_AFTER}.
    PERFORM fleet_end_stale_node_sessions(CAST('{STALE_AFTER}' AS interval));
""",
    )


def upgrade() -> None:
    schema = f0002._schema()
    f0003._execute(f0003._render(_END_FUNCTION, schema))
    f0003._execute(f"REVOKE EXECUTE ON FUNCTION {_END} FROM PUBLIC")
    f0003._execute(f0003._render(_lock(), schema))


def downgrade() -> None:
    f0003._execute(f0003._render(f0005._lock(), f0002._schema()))
    f0003._execute(f"DROP FUNCTION {_END}")
