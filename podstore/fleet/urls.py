"""Fleet database URLs: which ones are accepted, the driver they use, and how they are shown.

Accepted: ``postgresql://user@host:port/db``, ``postgresql+psycopg://…``, and the unix-socket
forms (``postgresql://user@/db?host=/run/postgresql``); none given means
``$PODSTORE_FLEET_URL``. Every URL is driven by psycopg 3 (``postgresql+psycopg``).

A URL is never printed as given: :func:`mask` and :func:`scrub` apply ``rules/secrets.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from podstore.errors import InvalidInputError
from podstore.rules import secrets

#: The environment variable naming the fleet database when no URL is given.
ENV = "PODSTORE_FLEET_URL"

_DRIVERS = ("postgresql", "postgresql+psycopg", "postgres")


@dataclass(frozen=True, slots=True)
class FleetURL:
    """A checked fleet database URL: ``url`` for SQLAlchemy, ``shown`` for people."""

    url: str
    shown: str
    password: str | None

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"FleetURL({self.shown!r})"


def mask(text: str) -> str:
    """``text`` (a URL, or a message holding one) with every URL password replaced by ***."""
    return secrets.mask_url(text)


def resolve(url: str | FleetURL | None) -> FleetURL:
    """The fleet database to use: ``url``, else ``$PODSTORE_FLEET_URL``.

    Raises InvalidInputError (with the URL masked) when neither is given, when the URL does not
    parse, or when it names another database than PostgreSQL.
    """
    if isinstance(url, FleetURL):
        return url
    if url is None or url == "":
        url = os.environ.get(ENV) or None
        if url is None:
            raise InvalidInputError(f"no fleet database: give a postgresql:// URL or set ${ENV}")
    if not isinstance(url, str):
        raise InvalidInputError(f"fleet URL: expected a postgresql:// URL, got {type(url)!r}")
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise InvalidInputError(
            f"fleet URL {mask(url)!r} does not parse: {mask(str(exc))}"
        ) from None
    if parsed.drivername not in _DRIVERS:
        raise InvalidInputError(
            f"fleet URL {mask(url)!r}: the fleet database is PostgreSQL "
            f"(postgresql:// or postgresql+psycopg://), not {parsed.drivername!r}"
        )
    if not parsed.database:
        raise InvalidInputError(f"fleet URL {mask(url)!r} names no database")
    password = parsed.password
    query_password = parsed.query.get("password")
    if password is None and isinstance(query_password, str):
        password = query_password
    parsed = parsed.set(drivername="postgresql+psycopg")
    return FleetURL(
        url=parsed.render_as_string(hide_password=False),
        shown=mask(url),
        password=str(password) if password else None,
    )


def scrub(text: str, url: FleetURL) -> str:
    """``text`` without the URL's password anywhere in it (and any URL in it masked)."""
    return secrets.scrub(text, url.password)
