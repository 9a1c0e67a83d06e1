"""``podstore watch --once --ship-to``: one sync, then one ship, against a real PostgreSQL.

The rule (README, docs/watch.md, the command's help): the local sync is applied first and
stays applied; exit 0 only when the sync was applied or unchanged *and* the ship succeeded;
a ship that fails exits 1 with the reason on one log line, the URL's password masked.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from harness.cli import without_paths
from harness.fleetlib import assert_same_state, fleet_events, node_events, rows
from harness.pgserver import PgServer
from harness.watch_support import (
    checkpoint_path,
    file_state,
    mutate,
    podstore_command,
    random_state,
    store_state,
)

from podstore import PodStore

SECRET = "Wh0le-Secret-91"


def _once(db: Path, cp: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*podstore_command(), "--db", str(db), "watch", "--once", str(cp),
         "--ship-to", url, "--node", "node-9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _with_password(url: str) -> str:
    return url.replace("postgres@", f"postgres:{SECRET}@")  # trust auth ignores it


def test_once_applies_then_ships_and_exits_0(tmp_path: Path, fleet_url: str) -> None:
    db = tmp_path / "node.db"
    cp = checkpoint_path(tmp_path)
    rng = random.Random(61)
    state = random_state(rng, 6)
    for _ in range(2):  # the first sync, then a change
        state.write(cp)
        done = _once(db, cp, _with_password(fleet_url))
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stderr
        with PodStore.open(db, readonly=True) as store:
            assert store_state(store) == file_state(state)
            assert fleet_events(fleet_url, store.store_id) == node_events(store)
            assert_same_state(fleet_url, store)
        state = mutate(rng, state, 3)


def test_once_with_a_bad_file_ships_nothing_and_exits_1(tmp_path: Path, fleet_url: str) -> None:
    db = tmp_path / "node.db"
    cp = checkpoint_path(tmp_path)
    cp.write_bytes(b'{"Data":')
    done = _once(db, cp, _with_password(fleet_url))
    assert done.returncode == 1, done.stderr
    assert "store left as it was" in done.stderr
    assert rows(fleet_url, "SELECT count(*) FROM fleet_stores") == [(0,)]


@pytest.mark.parametrize("where", ["stopped server", "no server on the port"])
def test_once_keeps_the_sync_when_the_ship_fails_and_exits_1_masked(
    tmp_path: Path, fleet_url: str, pg: PgServer, where: str
) -> None:
    db = tmp_path / "node.db"
    cp = checkpoint_path(tmp_path)
    state = random_state(random.Random(62), 5)
    state.write(cp)
    if where == "stopped server":
        url = _with_password(fleet_url)
        pg.stop()
        try:
            done = _once(db, cp, url)
        finally:
            pg.start()
    else:
        url = f"postgresql://podstore:{SECRET}@127.0.0.1:1/fleet"
        done = _once(db, cp, url)
    assert done.returncode == 1, done.stderr
    assert SECRET not in done.stderr + done.stdout
    err = without_paths(done.stderr, tmp_path, pg.socket_dir)
    failed = [line for line in err.splitlines() if " failed: " in line]
    assert len(failed) == 1, err
    # The whole reason on that one line: nothing else was printed after it.
    assert err.rstrip("\n").splitlines()[-1] == failed[0], err
    assert "ERROR ship to postgresql://" in failed[0] and ":***@" in failed[0], failed
    assert "Traceback" not in done.stderr
    with PodStore.open(db, readonly=True) as store:  # the sync stays applied
        assert store_state(store) == file_state(state)
        assert node_events(store)
    if where == "stopped server":  # nothing reached the server
        assert rows(fleet_url, "SELECT count(*) FROM fleet_stores") == [(0,)]


def test_a_ship_failure_is_described_on_one_line_without_the_password(tmp_path: Path) -> None:
    """A driver's message may span lines and echo the password (outside any URL); the line
    the follower logs has neither."""
    from podstore.watch.run import Watch, WatchConfig

    url = f"postgresql://podstore:{SECRET}@db.example:5432/fleet"
    with PodStore.open(tmp_path / "node.db") as store:
        shipper = Watch(store, WatchConfig(ship_to=url, node="n")).shipper
        assert shipper is not None
        text = shipper.describe(
            RuntimeError(f"connection failed: refused\n\tIs the server running?\n{SECRET} ")
        )
    assert "\n" not in text and "\t" not in text and SECRET not in text, text
    assert text == "connection failed: refused Is the server running? ***", text
    assert shipper.name == "ship to postgresql://podstore:***@db.example:5432/fleet"
