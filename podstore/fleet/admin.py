"""Administering the fleet database as its owner: node and reader roles, renaming a node,
retiring stores (docs/fleet.md, "Trust model").

Both grants take from PUBLIC what a restricted role must not have (CREATE on the schema,
TEMPORARY; as a superuser also ``set_config``, with which a statement could switch the role
back, and the large-object writers). The SQL is built here because role names are
identifiers: every name is checked against :data:`ROLE_NAME` and every literal quoted.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from podstore.errors import InvalidInputError
from podstore.fleet import db, migrate
from podstore.fleet.urls import FleetURL, resolve
from podstore.pure import validate

#: Role names ``grant-node`` and ``grant-reader`` accept (PostgreSQL's limit is 63 bytes).
ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")
NODE_ROLE_PREFIX = "podstore_node_"
#: The shipping functions a node role may call (f0002; f0003 gave the snapshot node items;
#: f0008 the physical-device facts).
SHIP_FUNCTIONS = (
    "fleet_ship_open(uuid, text)",
    "fleet_ship_batch(uuid, text, bigint, bytea, jsonb, bytea)",
    "fleet_ship_snapshot(uuid, text, bigint, timestamptz, bytea, json, json, jsonb, bytea, json, "
    "json)",
    "fleet_ship_physical(uuid, text, json, json)",
)
#: What a reader may call besides reading (f0009): bringing the kept intervals up to date.
READER_FUNCTIONS = ("fleet_intervals_catch_up()",)
SET_CONFIG = "pg_catalog.set_config(text, text, boolean)"
#: The functions with which any role keeps data of its own in large objects (PUBLIC's by default).
LARGE_OBJECT_FUNCTIONS = (
    "pg_catalog.lo_creat(integer)",
    "pg_catalog.lo_create(oid)",
    "pg_catalog.lo_from_bytea(oid, bytea)",
    "pg_catalog.lo_import(text)",
    "pg_catalog.lo_import(text, oid)",
    "pg_catalog.lo_open(oid, integer)",
    "pg_catalog.lo_put(oid, bigint, bytea)",
)
REVOKE_LARGE_OBJECTS = f"REVOKE EXECUTE ON FUNCTION {', '.join(LARGE_OBJECT_FUNCTIONS)} FROM PUBLIC"
#: Temporary file space one statement of a node or reader role may fill (superuser setting).
TEMP_FILE_LIMIT = "1GB"
_TEMP_FILE_LIMIT = re.compile(r"[1-9][0-9]{0,9}(kB|MB|GB|TB)")
#: Connections a node role may hold at once, and its sessions' limits (role settings).
NODE_CONNECTIONS = 4
NODE_SETTINGS = {
    "statement_timeout": "5min",
    "lock_timeout": "1min",
    "idle_in_transaction_session_timeout": "5min",
}


def node_role(node: str) -> str:
    """``podstore_node_`` and ``node`` with every character outside ``[a-z0-9_]`` as ``_``.
    Raises InvalidInputError past PostgreSQL's 63 bytes (name the role with ``--role``)."""
    name = NODE_ROLE_PREFIX + re.sub(r"[^a-z0-9_]", "_", node)
    if len(name) > 63:
        raise InvalidInputError(
            f"node {node!r}: its role name {name[:20]}… is longer than 63 bytes; name the "
            "role with --role"
        )
    return name


def _role(name: str) -> str:
    name = validate.text(name, "role")
    if not ROLE_NAME.fullmatch(name) or name.startswith("pg_"):
        raise InvalidInputError(
            f"role {name!r}: expected a name of letters, digits, _ . - (up to 63, not "
            "starting with a digit or pg_)"
        )
    return name


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _role_block(role: str, login: bool) -> str:
    return f"""DO $podstore$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {_literal(role)}) THEN
        CREATE ROLE {_ident(role)} {"LOGIN" if login else "NOLOGIN"};
    END IF;
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), {_literal(role)});
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), {_literal(role)});
END
$podstore$"""


def _temp_limit(role: str, limit: str) -> str:
    if not isinstance(limit, str) or not _TEMP_FILE_LIMIT.fullmatch(limit):
        raise InvalidInputError(
            f"temp_file_limit: expected a size such as 1GB or 512MB, got {limit!r}"
        )
    return f"ALTER ROLE {_ident(role)} SET temp_file_limit = '{limit}'"


def grant_node_sql(
    node: str, role: str | None = None, *, temp_file_limit: str = TEMP_FILE_LIMIT
) -> list[str]:
    """The statements :func:`grant_node` runs, in order (``fleet grant-node --print-sql``);
    the last two need a superuser."""
    node = validate.text(node, "node")
    if not node:
        raise InvalidInputError("node: expected a non-empty name")
    name = _role(role) if role is not None else node_role(node)
    return [
        _role_block(name, login=True),
        # One node's shippers need a few connections and short statements: no more, so that
        # one node role cannot take the server from the others.
        f"ALTER ROLE {_ident(name)} CONNECTION LIMIT {NODE_CONNECTIONS}",
        *(f"ALTER ROLE {_ident(name)} SET {k} = '{v}'" for k, v in NODE_SETTINGS.items()),
        f"GRANT SELECT ON fleet_alembic_version TO {_ident(name)}",
        f"GRANT EXECUTE ON FUNCTION {', '.join(SHIP_FUNCTIONS)} TO {_ident(name)}",
        "INSERT INTO fleet_node_grants (node, role_name) "
        f"VALUES ({_literal(node)}, {_literal(name)}) ON CONFLICT DO NOTHING",
        # A node role can keep a transaction open for ever (its timeouts are its own): the
        # membership lets the granting role end its sessions without a superuser, nothing else.
        f"GRANT {_ident(name)} TO CURRENT_USER",
        _temp_limit(name, temp_file_limit),
        REVOKE_LARGE_OBJECTS,
    ]


def _reader_relations() -> list[str]:
    from podstore.fleet import schema, views

    return [t.name for t in schema.metadata.sorted_tables] + [name for name, _ in views.VIEWS]


def grant_reader_sql(
    role: str, *, login: bool = False, temp_file_limit: str = TEMP_FILE_LIMIT
) -> list[str]:
    """The statements :func:`grant_reader` runs, in order (``fleet grant-reader
    --print-sql``); the last three need a superuser."""
    name = _role(role)
    return [
        _role_block(name, login=login),
        *([f"ALTER ROLE {_ident(name)} LOGIN"] if login else []),
        f"GRANT SELECT ON {', '.join(_reader_relations())} TO {_ident(name)}",
        f"GRANT EXECUTE ON FUNCTION {', '.join(READER_FUNCTIONS)} TO {_ident(name)}",
        # So that `fleet sql` with the granting role's URL can SET ROLE to the reader.
        f"GRANT {_ident(name)} TO CURRENT_USER",
        f"REVOKE EXECUTE ON FUNCTION {SET_CONFIG} FROM PUBLIC",
        _temp_limit(name, temp_file_limit),
        REVOKE_LARGE_OBJECTS,
    ]


def _superuser_only(statement: str) -> str | None:
    if SET_CONFIG in statement:
        return (
            "set_config() is still executable by every role (only a superuser can "
            "revoke it): `fleet sql` with a superuser URL stays refused until a "
            "superuser runs this grant"
        )
    if statement == REVOKE_LARGE_OBJECTS:
        return (
            "every role may still create large objects (only a superuser can revoke "
            "lo_create and the like from PUBLIC): run this grant as a superuser"
        )
    if " SET temp_file_limit " in statement:
        return (
            "the role's temporary files are not bounded (temp_file_limit is a superuser "
            "setting): run this grant as a superuser"
        )
    return None


@dataclass(frozen=True, slots=True)
class GrantReport:
    """What a grant did: the role, whether it was created, what could not be done."""

    role: str
    created: bool
    warnings: tuple[str, ...] = ()


def _run_grant(
    url: FleetURL, role: str, statements: list[str], node: str | None = None
) -> GrantReport:
    from sqlalchemy import text

    warnings: list[str] = []
    with db.transaction(url) as conn:
        migrate.check_schema(conn, url)
        # One role ships one node: two names that map to one role (gpu-1.zone-a and
        # gpu-1-zone.a) would share a credential, so the second is refused, never re-pointed.
        other = conn.execute(
            text(
                "SELECT node FROM fleet_node_grants WHERE role_name = :r "
                "AND (CAST(:n AS text) IS NULL OR node <> :n) ORDER BY node LIMIT 1"
            ),
            {"r": role, "n": node},
        ).scalar()
        if other is not None:
            raise InvalidInputError(
                f"role {role} already ships node {other!r}; a role ships one node: name "
                "another role with --role"
            )
        # None: the role does not exist yet.
        role_super = conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).scalar()
        if role_super:
            raise InvalidInputError(f"role {role} is a superuser: it cannot be restricted")
        superuser = conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar_one()
        for statement in statements:
            skipped = None if superuser else _superuser_only(statement)
            if skipped is not None:
                warnings.append(skipped)
                continue
            conn.exec_driver_sql(statement, execution_options={"no_parameters": True})
    return GrantReport(role, role_super is None, tuple(warnings))


def grant_node(
    url: str | FleetURL | None,
    node: str,
    *,
    role: str | None = None,
    temp_file_limit: str = TEMP_FILE_LIMIT,
) -> GrantReport:
    """Create (if missing) the login role ``role`` (else :func:`node_role`) that may only call
    the shipping functions for ``node``. Steps only a superuser may take (temp_file_limit,
    large objects) are warnings in the report otherwise. Raises InvalidInputError for a bad
    name, FleetRefusedError when the URL's role lacks the rights."""
    target = resolve(url)
    statements = grant_node_sql(node, role, temp_file_limit=temp_file_limit)
    name = _role(role) if role is not None else node_role(node)
    return db.retrying(target, lambda: _run_grant(target, name, statements, node))


def grant_reader(
    url: str | FleetURL | None,
    role: str,
    *,
    login: bool = False,
    temp_file_limit: str = TEMP_FILE_LIMIT,
) -> GrantReport:
    """Create ``role`` if missing (NOLOGIN unless ``login``) with SELECT on the fleet's tables
    and views only, the role ``fleet sql`` runs as; the superuser-only steps (set_config,
    large objects, temp_file_limit) are warnings in the report otherwise."""
    target = resolve(url)
    statements = grant_reader_sql(role, login=login, temp_file_limit=temp_file_limit)
    name = _role(role)
    return db.retrying(target, lambda: _run_grant(target, name, statements))


_RENAME = """
    WITH renamed AS (
        UPDATE fleet_stores SET node = CAST(:new AS text) WHERE node = CAST(:old AS text)
        RETURNING store_id
    ),
    logged AS (
        INSERT INTO fleet_store_log (store_id, action, detail)
        SELECT store_id, 'renamed',
               format('node %s renamed to %s', CAST(:old AS text), CAST(:new AS text))
        FROM renamed
    ),
    granted AS (
        INSERT INTO fleet_node_grants (node, role_name)
        SELECT CAST(:new AS text), role_name FROM fleet_node_grants
        WHERE node = CAST(:old AS text)
        ON CONFLICT DO NOTHING
    ),
    ungranted AS (
        DELETE FROM fleet_node_grants WHERE node = CAST(:old AS text)
    )
    SELECT count(*) FROM renamed
"""


_NODE_USED = """
    SELECT EXISTS (SELECT FROM fleet_stores WHERE node = CAST(:node AS text))
        OR EXISTS (SELECT FROM fleet_node_grants WHERE node = CAST(:node AS text))
"""


def rename_node(url: str | FleetURL | None, old: str, new: str) -> int:
    """Give every store of node ``old`` (retired too) and its grants the name ``new``, logged
    per store; returns how many. Raises InvalidInputError when ``old`` has no store, ``new``
    has stores or grants, or the names are equal or empty."""
    from sqlalchemy import text

    target = resolve(url)
    old = validate.text(old, "old")
    new = validate.text(new, "new")
    if not old or not new or old == new:
        raise InvalidInputError("rename-node: expected two different, non-empty node names")

    def run() -> int:
        with db.transaction(target) as conn:
            migrate.check_schema(conn, target)
            # Checked in the transaction that renames (an exception rolls it all back): a
            # rename never merges two nodes, and never moves grants without a store.
            taken = conn.execute(text(_NODE_USED), {"node": new}).scalar_one()
            if taken:
                raise InvalidInputError(
                    f"rename-node: node {new!r} already has stores or grants in the fleet; "
                    "renaming into it would merge two nodes"
                )
            renamed = int(conn.execute(text(_RENAME), {"old": old, "new": new}).scalar_one())
            if not renamed:
                raise InvalidInputError(f"rename-node: the fleet holds no store of node {old!r}")
            return renamed

    return db.retrying(target, run)


def _uuid(value: str) -> str:
    text = validate.text(value, "store_id")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise InvalidInputError(f"store_id: {text!r} is not a UUID") from None


_RETIRE = """
    WITH retired AS (
        UPDATE fleet_stores SET retired_at = now()
        WHERE retired_at IS NULL
          AND (CAST(:node AS text) IS NULL OR node = :node)
          AND (CAST(:store_id AS uuid) IS NULL OR store_id = CAST(:store_id AS uuid))
        RETURNING store_id, node
    ),
    logged AS (
        INSERT INTO fleet_store_log (store_id, action, detail)
        SELECT store_id, 'retired', format('store of node %s retired', node) FROM retired
    ),
    -- A retired node's roles ship no new store either (grant-node gives the rights back).
    ungranted AS (
        DELETE FROM fleet_node_grants WHERE node = CAST(:node AS text)
    )
    SELECT CAST(store_id AS text), node FROM retired ORDER BY node, store_id
"""


def retire(
    url: str | FleetURL | None, *, node: str | None = None, store_id: str | None = None
) -> list[tuple[str, str]]:
    """Retire the stores of ``node`` or the store ``store_id`` (one of them; docs/fleet.md,
    "One identity per store"); a node's grants go with it. Returns the (store_id, node)
    retired. Raises InvalidInputError when nothing matched a store in service."""
    from sqlalchemy import text

    target = resolve(url)
    if (node is None) == (store_id is None):
        raise InvalidInputError("retire: give a node name or a store_id (one of them)")
    params = {
        "node": None if node is None else validate.text(node, "node"),
        "store_id": None if store_id is None else _uuid(store_id),
    }

    def run() -> list[tuple[str, str]]:
        with db.transaction(target) as conn:
            migrate.check_schema(conn, target)
            return [(str(r[0]), str(r[1])) for r in conn.execute(text(_RETIRE), params)]

    retired = db.retrying(target, run)
    if not retired:
        what = f"node {node!r}" if node is not None else f"store {store_id}"
        raise InvalidInputError(f"retire: the fleet holds no store in service of {what}")
    return retired
