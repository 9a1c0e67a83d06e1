"""Fleet URLs: the accepted forms, the environment fallback, and masking (no server)."""

from __future__ import annotations

import pytest

from podstore import InvalidInputError
from podstore.fleet.db import translate
from podstore.fleet.urls import mask, resolve


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://u:pw@db.example:5433/fleet", "postgresql://u:***@db.example:5433/fleet"),
        ("postgresql+psycopg://u:p%40ss@h/fleet", "postgresql+psycopg://u:***@h/fleet"),
        (
            "postgresql://u@/fleet?host=/run/postgresql",
            "postgresql://u@/fleet?host=/run/postgresql",
        ),
        (
            "postgresql://u@h/fleet?password=pw&sslmode=require",
            "postgresql://u@h/fleet?password=***&sslmode=require",
        ),
        ("postgres://u:pw@h/fleet", "postgres://u:***@h/fleet"),
    ],
)
def test_accepted_forms_use_psycopg_and_are_shown_masked(given: str, shown: str) -> None:
    url = resolve(given)
    assert url.url.startswith("postgresql+psycopg://")
    assert url.shown == shown == str(url)
    assert "pw" not in repr(url) and "p%40ss" not in repr(url)


def test_environment_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODSTORE_FLEET_URL", "postgresql://u:pw@h/f")
    assert resolve(None).shown == "postgresql://u:***@h/f"
    monkeypatch.delenv("PODSTORE_FLEET_URL")
    with pytest.raises(InvalidInputError, match="PODSTORE_FLEET_URL"):
        resolve(None)


@pytest.mark.parametrize(
    "bad", ["sqlite:///x.db", "mysql://u:pw@h/db", "postgresql://u:pw@h", "not a url", "::"]
)
def test_other_urls_are_refused_without_the_password(bad: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        resolve(bad)
    assert "pw" not in str(info.value)


def test_mask_in_running_text_and_errors() -> None:
    text = "could not connect to postgresql://admin:hunter2@h/db?password=hunter2 (x)"
    assert "hunter2" not in mask(text)
    url = resolve("postgresql://admin:hunter2@h/db")
    err = translate(OSError("libpq said hunter2 was wrong"), url)
    assert "hunter2" not in str(err) and "admin:***@h" in str(err)


def test_the_watch_interface_is_where_it_is_documented() -> None:
    import inspect

    import podstore.fleet.ship
    from podstore import FleetUnavailableError, PodStoreError

    sig = inspect.signature(podstore.fleet.ship.ship)
    assert list(sig.parameters)[:3] == ["store", "url", "node"]
    assert sig.parameters["node"].kind is inspect.Parameter.KEYWORD_ONLY
    assert issubclass(FleetUnavailableError, PodStoreError)
    assert podstore.fleet.ship.ShipReport.__name__ == "ShipReport"
