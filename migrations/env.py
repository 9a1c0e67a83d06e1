"""Alembic environment for podstore.

Two callers: ``PodStore.open`` hands over its own connection, already inside ``BEGIN
IMMEDIATE`` (``config.attributes["connection"]``), and the ``alembic`` command line, which
connects to ``$PODSTORE_DB`` or the ini's URL. Logging is configured from the ini only in the
second case: a library embedded in an agent must not reset its host's loggers.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from podstore.sqlite.connection import create_sqlalchemy_engine, database_url
from podstore.storage.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite can only ALTER through table copies; batch mode does that.
        render_as_batch=True,
        # SQLite DDL is transactional; saying so keeps a failed upgrade from half-applying.
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    url = os.environ.get("PODSTORE_DB") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: set PODSTORE_DB or sqlalchemy.url in alembic.ini")
    engine = create_sqlalchemy_engine(database_url(url))
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("podstore migrations run online only (they need the SQLite file)")
run_migrations_online()
