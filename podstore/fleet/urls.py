"""Fleet database URLs: ``postgresql://`` (or ``postgres://``, ``postgresql+psycopg://``,
unix-socket forms), all driven by psycopg 3, and never shown with their password."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote

from podstore.errors import InvalidInputError
from podstore.pure import secrets

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


def resolve(url: str | FleetURL | None) -> FleetURL:
    """The fleet database: ``url``, else ``$PODSTORE_FLEET_URL``. Raises InvalidInputError
    (the URL masked) when neither is given, or the URL does not parse or is not PostgreSQL."""
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
            f"fleet URL {secrets.mask_url(url)!r} does not parse: {secrets.mask_url(str(exc))}"
        ) from None
    if parsed.drivername not in _DRIVERS:
        raise InvalidInputError(
            f"fleet URL {secrets.mask_url(url)!r}: the fleet database is PostgreSQL "
            f"(postgresql:// or postgresql+psycopg://), not {parsed.drivername!r}"
        )
    if not parsed.database:
        raise InvalidInputError(f"fleet URL {secrets.mask_url(url)!r} names no database")
    password = parsed.password
    query_password = parsed.query.get("password")
    if password is None and isinstance(query_password, str):
        password = query_password
    # Shown as the parser read it, not by a pattern over the text: a password holding an
    # unencoded / ? # or a space is still the password, and is masked whole.
    shown = parsed
    if shown.password is not None:
        shown = shown.set(password="***")
    if "password" in shown.query:
        shown = shown.update_query_dict({"password": "***"})
    parsed = parsed.set(drivername="postgresql+psycopg")
    return FleetURL(
        url=parsed.render_as_string(hide_password=False),
        shown=unquote(shown.render_as_string(hide_password=False)),
        password=str(password) if password else None,
    )


#: The largest URL file read (a URL is a line; anything bigger is not one).
MAX_URL_FILE = 64 << 10


def read_url_file(path: str | os.PathLike[str]) -> str:
    """The one URL in the file at ``path`` (``#`` lines ignored; ``--ship-to-file``: no
    password in argv). It must be a regular file (symlinks followed, as in a secret volume) of
    this user or root, writable by its owner only, and readable by its owner only when the URL
    holds a password. Raises InvalidInputError naming the file, never its content."""
    import stat

    where = f"fleet URL file {os.fspath(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InvalidInputError(f"{where}: cannot open it: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInputError(f"{where}: not a regular file")
        if info.st_uid not in (os.geteuid(), 0):
            raise InvalidInputError(
                f"{where}: owned by uid {info.st_uid}, neither this user nor root"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            raise InvalidInputError(
                f"{where}: writable by group or others (mode {mode:04o}): anyone who can "
                "write it can redirect shipping; chmod go-w it"
            )
        if info.st_size > MAX_URL_FILE:
            raise InvalidInputError(f"{where}: {info.st_size} bytes, too large for a URL")
        data = os.read(fd, MAX_URL_FILE + 1)
    finally:
        os.close(fd)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{where}: not UTF-8 text") from None
    lines = [s for s in map(str.strip, content.splitlines()) if s and not s.startswith("#")]
    if not lines:
        raise InvalidInputError(f"{where}: holds no URL")
    if len(lines) > 1:
        raise InvalidInputError(f"{where}: holds {len(lines)} lines; expected one URL")
    try:
        checked = resolve(lines[0])
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if checked.password is not None and mode & 0o044:
        raise InvalidInputError(
            f"{where}: readable by group or others (mode {mode:04o}) and the URL holds a "
            "password; chmod 600 it (a Kubernetes secret: defaultMode 0400)"
        )
    return lines[0]
