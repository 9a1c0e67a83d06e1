"""Shared fixtures: a real SQLite file per test, and the hypothesis profiles.

Profiles: ``ci`` (the default: derandomized, no example database, modest example counts so the
suite stays quick on a small machine), ``dev`` (random, remembers failures) and ``thorough``
(many more examples). Pick one with ``PODSTORE_HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from podstore import PodStore

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=100,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile(
    "thorough", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("PODSTORE_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's store lives (not created yet)."""
    return tmp_path / "store.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[PodStore]:
    """A fresh store on a real file, closed after the test."""
    s = PodStore.open(db_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="session")
def filled_stores(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Filled stores (PODSTORE_MIGRATION_ENTRIES entries, default 10,000) at every schema
    revision, built once per session for the migration crash harnesses
    (tests/harness/filled.py)."""
    from harness.filled import build_filled_stores

    entries = int(os.environ.get("PODSTORE_MIGRATION_ENTRIES", "10000"))
    return build_filled_stores(tmp_path_factory.mktemp("filled"), entries)
