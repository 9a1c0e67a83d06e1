"""Alembic environment of the central fleet schema.

Only ``podstore.fleet.migrate`` runs it, handing over its own connection (inside a transaction
that holds the migrations' lock), so logging is never reconfigured here.
"""

from __future__ import annotations

from alembic import context

from podstore.fleet.schema import VERSION_TABLE, metadata

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run the fleet migrations with `podstore fleet init --url URL`")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("the fleet migrations run online only")
run_migrations_online()
