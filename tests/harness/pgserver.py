"""A throwaway PostgreSQL server for the fleet tests and the fleet benchmark.

``initdb`` and ``pg_ctl`` in a new temporary directory: trust authentication, no TCP listener,
the unix socket in that directory, removed again by :meth:`PgServer.stop`. ``initdb`` refuses
to run as root (CI runs as root), so as root the server runs as the unprivileged ``postgres``
user (created when missing), through ``runuser``; the directory is handed to that user.

The server binaries are looked up generically: ``$PODSTORE_PG_BINDIR``, ``pg_config
--bindir``, the newest ``/usr/lib/postgresql/*/bin``, then ``PATH``. ``.ci/run`` installs the
distribution's ``postgresql`` package when none is found.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: The server's superuser (made by initdb) and the unprivileged OS user it runs as when root.
SUPERUSER = "postgres"
OS_USER = "postgres"
PORT = 5432  # only names the socket file (.s.PGSQL.5432); there is no TCP listener


class PgServerUnavailable(RuntimeError):
    """No PostgreSQL server binaries were found."""


def _has_server(bindir: str | None) -> bool:
    return bool(bindir) and all(
        os.access(os.path.join(str(bindir), b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")
    )


def find_bindir() -> str:
    """The directory holding initdb, pg_ctl and postgres; raises PgServerUnavailable."""
    candidates: list[str | None] = [os.environ.get("PODSTORE_PG_BINDIR")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            )
            candidates.append(out.stdout.strip())

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    for bindir in candidates:
        if _has_server(bindir):
            assert bindir is not None
            return bindir
    raise PgServerUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found; install the "
        "distribution's postgresql package (.ci/run does) or set PODSTORE_PG_BINDIR"
    )


def _ensure_os_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return pwd.getpwnam(OS_USER)


class PgServer:
    """One PostgreSQL cluster in a temporary directory; :meth:`start` it, :meth:`stop` it."""

    def __init__(self, *, fsync: bool = False, prefix: str = "podstore-pg-") -> None:
        self.bindir = find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.fsync = fsync
        self._as_root = os.geteuid() == 0
        self.socket_dir.mkdir()
        if self._as_root:
            user = _ensure_os_user()
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        )
        settings = [
            "listen_addresses = ''",
            f"unix_socket_directories = '{self.socket_dir}'",
            f"port = {PORT}",
            f"fsync = {'on' if fsync else 'off'}",
            f"synchronous_commit = {'on' if fsync else 'off'}",
            "full_page_writes = " + ("on" if fsync else "off"),
            "max_connections = 50",
            "log_min_messages = warning",
        ]
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n# podstore throwaway server\n" + "\n".join(settings) + "\n")

    def _argv(self, program: str, *args: str) -> list[str]:
        argv = [os.path.join(self.bindir, program), *args]
        if self._as_root:
            return ["runuser", "-u", OS_USER, "--", *argv]
        return argv

    def _run(self, program: str, *args: str, timeout: float = 120) -> None:
        proc = subprocess.run(
            self._argv(program, *args), capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} failed ({proc.returncode}): {proc.stderr}\n{log}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        proc = subprocess.run(
            self._argv("pg_ctl", "-D", str(self.data), "status"), capture_output=True, timeout=30
        )
        return proc.returncode == 0

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        """A SQLAlchemy/libpq URL of a database on this server (unix socket)."""
        auth = SUPERUSER if password is None else f"{SUPERUSER}:{password}"
        return f"postgresql://{auth}@/{database}?host={self.socket_dir}&port={PORT}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL through psql as the superuser; returns its output (unaligned, no headers)."""
        proc = subprocess.run(
            [
                os.path.join(self.bindir, "psql"),
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                str(self.socket_dir),
                "-p",
                str(PORT),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed: {proc.stderr}")
        return proc.stdout

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (if running) and remove its directory."""
        with contextlib.suppress(Exception):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def fleet_database(name: str) -> Iterator[str]:
    """A throwaway server with one fleet database of the current schema: its URL. Fails the
    test (never skips) when the server binaries are missing."""
    import pytest

    from podstore.fleet import db, migrate

    try:
        server = PgServer()
    except PgServerUnavailable as exc:
        pytest.fail(str(exc))
    try:
        server.start()
        url = server.create_database(name)
        migrate.init(url)
        yield url
    finally:
        db.dispose_all()
        migrate.forget_all()
        server.destroy()
