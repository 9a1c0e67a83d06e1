"""Fleet URLs: the accepted forms, the environment fallback, and masking (no server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podstore import InvalidInputError
from podstore.fleet.db import translate
from podstore.fleet.urls import read_url_file, resolve
from podstore.pure.secrets import mask_url as mask


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


def _url_file(tmp_path: Path, text: str, mode: int, name: str = "url") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_url_file_is_read_trimmed_and_checked(tmp_path: Path) -> None:
    secret = "postgresql://ship:pw-in-file@db.example/fleet"
    good = _url_file(tmp_path, f"# the fleet\n\n  {secret}  \n", 0o600)
    assert read_url_file(good) == secret
    assert read_url_file(_url_file(tmp_path, secret, 0o400, "ro")) == secret
    # Followed like a Kubernetes secret volume's links.
    link = tmp_path / "link"
    link.symlink_to(good)
    assert read_url_file(link) == secret
    # No password in it: readable by others is fine (libpq finds the password elsewhere).
    plain = "postgresql://ship@db.example/fleet"
    assert read_url_file(_url_file(tmp_path, plain + "\n", 0o644, "plain")) == plain


@pytest.mark.parametrize(
    ("text", "mode", "words"),
    [
        ("postgresql://ship:pw-in-file@h/f\n", 0o644, "readable by group or others"),
        ("postgresql://ship:pw-in-file@h/f\n", 0o640, "chmod 600"),
        ("postgresql://ship@h/f\n", 0o620, "writable by group or others"),
        ("postgresql://ship@h/f\n", 0o602, "writable by group or others"),
        ("", 0o600, "holds no URL"),
        ("# only a comment\n", 0o600, "holds no URL"),
        ("postgresql://a:pw-in-file@h/f\npostgresql://b@h/f\n", 0o600, "2 lines"),
        ("mysql://u:pw-in-file@h/f\n", 0o600, "PostgreSQL"),
        (b"\xff\xfe".decode("latin-1"), 0o600, "UTF-8"),
    ],
)
def test_url_file_refusals_name_the_file_and_never_the_password(
    tmp_path: Path, text: str, mode: int, words: str
) -> None:
    path = tmp_path / "url"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    path.chmod(mode)
    with pytest.raises(InvalidInputError) as info:
        read_url_file(path)
    assert words in str(info.value) and str(path) in str(info.value)
    assert "pw-in-file" not in str(info.value)


def test_url_file_that_is_missing_or_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot open it"):
        read_url_file(tmp_path / "absent")
    with pytest.raises(InvalidInputError, match="not a regular file"):
        read_url_file(tmp_path)


def test_url_file_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    path = _url_file(tmp_path, "postgresql://ship@h/f\n", 0o600)
    if os.geteuid() == 0:
        os.chown(path, 4242, -1)
        with pytest.raises(InvalidInputError, match="owned by uid 4242"):
            read_url_file(path)
    else:
        # Without root no file can be given to another user; a file of root's is accepted.
        root_owned = Path("/etc/hostname")
        assert root_owned.stat().st_uid == 0
        with pytest.raises(InvalidInputError) as info:
            read_url_file(root_owned)
        assert "owned by" not in str(info.value)


@pytest.mark.parametrize("secret", ["p/w", "p?w", "p#w", "p w", "p:w/x?y#z"])
def test_a_password_with_url_characters_is_masked_whole(secret: str) -> None:
    from podstore.fleet.urls import resolve

    url = resolve(f"postgresql://fleet:{secret}@db.example:5432/fleet")
    assert url.password == secret
    assert url.shown == "postgresql://fleet:***@db.example:5432/fleet"
    assert url.url.endswith("@db.example:5432/fleet")


def test_ship_warns_of_a_password_in_argv_and_takes_the_url_from_a_file(
    tmp_path: Path, fleet_url: str
) -> None:
    import subprocess
    import sys

    from podstore import PodStore

    secret = "s3/cr?t#x y"
    with_password = fleet_url.replace("postgres@", f"postgres:{secret}@")
    db = tmp_path / "n.db"
    with PodStore.open(db) as store:
        store.insert("p", "c", "gpu", {0: ["G1"]}, None)
    cmd = [sys.executable, "-c", "from podstore.cli import main; main()", "--db", str(db), "ship"]
    argv = subprocess.run(
        [*cmd, "--node", "n", "--to", with_password], capture_output=True, text=True, timeout=120
    )
    assert argv.returncode == 0, argv.stderr
    assert "holds a password" in argv.stderr and "--to-file" in argv.stderr
    assert "postgres:***@" in argv.stdout
    for part in ("s3/cr", "cr?t", "t#x", "x y"):
        assert part not in argv.stdout + argv.stderr
    url_file = tmp_path / "fleet-url"
    url_file.write_text(with_password + "\n")
    url_file.chmod(0o600)
    from_file = subprocess.run(
        [*cmd, "--node", "n", "--to-file", str(url_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert from_file.returncode == 0, from_file.stderr
    assert "holds a password" not in from_file.stderr and secret not in from_file.stdout
    assert "shipped 0 events" in from_file.stdout
    url_file.chmod(0o644)  # a password others can read: refused, naming the file only
    loose = subprocess.run(
        [*cmd, "--node", "n", "--to-file", str(url_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loose.returncode == 1 and "readable by group or others" in loose.stderr
    assert secret not in loose.stderr
