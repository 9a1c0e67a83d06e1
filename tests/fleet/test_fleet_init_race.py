"""A ``fleet init`` that waited for another run sees the schema the other created.

PostgreSQL keeps a session's failed name lookups cached until it processes invalidations,
and waiting for an advisory lock does not process them: the waiting run's ``to_regclass``
still found no version table after the other committed, so both runs reported "created"
(seen in CI). Here the other run is this test, holding the lock until the waiting run is seen
waiting in ``pg_locks``: no timing decides the order.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from podstore.fleet import db, migrate
from podstore.fleet.sql import ADVISORY_LOCK, VERSION_TABLE
from podstore.fleet.urls import resolve

WAITING = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


def test_a_run_that_waited_for_the_lock_sees_the_schema_committed_meanwhile(
    empty_url: str,
) -> None:
    url = resolve(empty_url)
    reports: list[migrate.InitReport | BaseException] = []

    def waiting_run() -> None:
        try:
            reports.append(migrate.init(url))
        except BaseException as exc:  # handed to the test's thread
            reports.append(exc)

    engine = sa.create_engine(url.url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as watcher, engine.begin() as other:
            other.execute(sa.text(ADVISORY_LOCK), {"id": migrate._LOCK_ID})
            run = threading.Thread(target=waiting_run)
            run.start()
            while not watcher.execute(sa.text(WAITING)).scalar() and run.is_alive():
                watcher.rollback()  # a fresh snapshot of pg_locks each time
            # What the other run leaves when it commits: the version table at head.
            other.execute(sa.text(f"CREATE TABLE {VERSION_TABLE} (version_num varchar(32))"))
            other.execute(
                sa.text(f"INSERT INTO {VERSION_TABLE} VALUES (:v)"), {"v": migrate.HEAD_REVISION}
            )
        run.join(timeout=120)
    finally:
        engine.dispose()
        db.dispose_all()
    (report,) = reports
    assert not isinstance(report, BaseException), report
    assert report.before == migrate.HEAD_REVISION and not report.changed
