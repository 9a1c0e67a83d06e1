"""The fleet tests' PostgreSQL: one throwaway server per session (tests/harness/pgserver.py),
one fresh initialised database per test that asks for ``fleet_url``.

Never skipped: without server binaries the fixture fails and says how to get them (.ci/run
installs the distribution's postgresql package).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from harness.pgserver import PgServer, PgServerUnavailable

from podstore.fleet import admin, db, migrate


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    try:
        server = PgServer()
    except PgServerUnavailable as exc:
        pytest.fail(str(exc))
    try:
        server.start()
        yield server
    finally:
        db.dispose_all()
        migrate.forget_all()
        server.destroy()


@pytest.fixture
def empty_url(pg: PgServer) -> Iterator[str]:
    """A new, empty database on the session's server (no fleet schema)."""
    yield pg.create_database("t_" + uuid.uuid4().hex[:16])
    db.dispose_all()


@pytest.fixture
def fleet_url(empty_url: str) -> str:
    """A new database with the fleet schema at head, and the reader role `fleet sql` runs
    statements as."""
    migrate.init(empty_url)
    admin.grant_reader(empty_url, "podstore_reader")
    return empty_url
