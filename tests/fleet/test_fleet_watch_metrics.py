"""``podstore watch --ship-to-file FILE`` / ``--ship-to-env`` against a real PostgreSQL: the URL
never on the command line (``/proc/PID/cmdline``) or in the log, the shipping metrics on
``/metrics`` — the lag rises while the server is down and falls to 0 when it is back — and a
URL file that is missing, empty, unsafe or appears later."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.fleetlib import fleet_events, node_events
from harness.pgserver import PgServer
from harness.watch_support import (
    WatchProcess,
    checkpoint_path,
    mutate,
    podstore_command,
    random_state,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families

from podstore import PodStore, PodStoreError

SECRET = "Sh1p-Secret-4417"
_SERVING = r"serving metrics on http://([0-9.]+):(\d+)/metrics"


def with_password(url: str) -> str:
    return url.replace("postgres@", f"postgres:{SECRET}@")  # trust auth ignores it


def url_file(tmp_path: Path, url: str, mode: int = 0o600) -> Path:
    path = tmp_path / "fleet-url"
    path.write_text(f"# the fleet database\n{url}\n")
    path.chmod(mode)
    return path


def samples(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("podstore_ship_")
    }


def high_water(db: Path) -> int:
    try:
        with PodStore.open(db, readonly=True) as store, store.reader() as reader:
            return reader.high_water()
    except PodStoreError:
        return -1


@pytest.fixture
def watches() -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for w in started:
        w.kill()


def test_lag_rises_while_the_server_is_down_and_falls_to_0_after(
    tmp_path: Path, fleet_url: str, pg: PgServer, watches: list[WatchProcess]
) -> None:
    rng = random.Random(71)
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "node.db"
    state = random_state(rng, 6)
    state.write(cp)
    secret_url = with_password(fleet_url)
    urls = url_file(tmp_path, secret_url)
    w = WatchProcess(
        db, cp, "--ship-to-file", str(urls), "--node", "node-m", "--interval", "0.5",
        "--metrics-addr", "127.0.0.1:0", log=tmp_path / "w.log",
    )  # fmt: skip
    watches.append(w)
    found = w.wait_log(_SERVING, timeout=60)
    base = f"http://{found[1]}:{found[2]}"

    def caught_up() -> bool:
        s = samples(base)
        return s.get("podstore_ship_lag_events") == 0 and s.get(
            "podstore_ship_last_seq"
        ) == high_water(db)

    wait_for(caught_up, 60, step=0.1)
    s = samples(base)
    assert s["podstore_ship_successes_total"] >= 1 and s["podstore_ship_failures_total"] == 0
    assert s["podstore_ship_lag_seconds"] == 0
    assert s["podstore_ship_last_success_timestamp_seconds"] > 0
    # Not on the command line: the process's own argv, as anyone on the node can read it.
    cmdline = Path(f"/proc/{w.proc.pid}/cmdline").read_bytes().decode()
    assert SECRET not in cmdline and "postgresql" not in cmdline, cmdline

    pg.stop()
    try:
        shipped = int(samples(base)["podstore_ship_last_seq"])
        state = mutate(rng, state, 3)
        state.write(cp)
        wait_for(lambda: samples(base).get("podstore_ship_lag_events", 0) > 0, 30, step=0.1)
        first = samples(base)
        assert first["podstore_ship_lag_seconds"] > 0
        assert first["podstore_ship_last_seq"] == shipped
        # It keeps rising: more events, and the oldest unshipped one grows older.
        state = mutate(rng, state, 3)
        state.write(cp)
        wait_for(
            lambda: samples(base)["podstore_ship_lag_events"] > first["podstore_ship_lag_events"],
            30,
            step=0.1,
        )
        wait_for(lambda: samples(base)["podstore_ship_failures_total"] >= 1, 30, step=0.1)
        later = samples(base)
        assert later["podstore_ship_lag_seconds"] > first["podstore_ship_lag_seconds"]
        assert later["podstore_ship_lag_events"] == high_water(db) - shipped
        assert w.proc.poll() is None, w.log()
    finally:
        pg.start()

    # Back: the retries catch up, and the lag is 0 again.
    wait_for(caught_up, 120, step=0.2)
    with PodStore.open(db, readonly=True) as store:
        assert fleet_events(fleet_url, store.store_id) == node_events(store)
    assert w.stop() == 0, w.log()
    log = w.log()
    assert SECRET not in log
    assert secret_url not in log and fleet_url not in log
    assert "failed" in log  # the outage was logged, masked
    assert "postgres:***@" in log


def test_ship_to_env_takes_the_url_from_the_environment(
    tmp_path: Path, fleet_url: str, watches: list[WatchProcess]
) -> None:
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "node.db"
    random_state(random.Random(72), 4).write(cp)
    env = {**os.environ, "PODSTORE_FLEET_URL": with_password(fleet_url)}
    log = tmp_path / "w.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [*podstore_command(), "--db", str(db), "watch", str(cp), "--ship-to-env",
             "--node", "node-e", "--interval", "0.5"],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )  # fmt: skip
        try:

            def shipped() -> bool:
                try:
                    with PodStore.open(db, readonly=True) as store:
                        return fleet_events(fleet_url, store.store_id) == node_events(store)
                except PodStoreError:
                    return False

            wait_for(shipped, 60, step=0.1)
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
            assert SECRET not in cmdline and "postgresql" not in cmdline
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code == 0
    assert SECRET not in log.read_text()


def test_a_url_file_that_appears_later_is_shipped_to_then(
    tmp_path: Path, fleet_url: str, watches: list[WatchProcess]
) -> None:
    """No Secret yet (the optional Kubernetes volume is empty): the watch follows without
    shipping, says so once, counts no failure; once the file holds a URL it ships."""
    cp = checkpoint_path(tmp_path)
    db = tmp_path / "node.db"
    rng = random.Random(73)
    state = random_state(rng, 4)
    state.write(cp)
    urls = tmp_path / "fleet-url"
    w = WatchProcess(
        db, cp, "--ship-to-file", str(urls), "--node", "node-l", "--interval", "0.5",
        "--metrics-addr", "127.0.0.1:0", log=tmp_path / "w.log",
    )  # fmt: skip
    watches.append(w)
    found = w.wait_log(_SERVING, timeout=60)
    base = f"http://{found[1]}:{found[2]}"
    w.wait_log("holds no fleet URL: not shipping until it does")
    time.sleep(1.0)
    s = samples(base)
    assert s["podstore_ship_failures_total"] == 0 and s["podstore_ship_successes_total"] == 0
    assert "podstore_ship_lag_events" not in s  # not known: no fleet has answered
    url_file(tmp_path, with_password(fleet_url))
    state = mutate(rng, state, 2)
    state.write(cp)  # an applied sync asks for a ship, which reads the file again
    wait_for(lambda: samples(base).get("podstore_ship_lag_events") == 0, 60, step=0.1)
    with PodStore.open(db, readonly=True) as store:
        assert fleet_events(fleet_url, store.store_id) == node_events(store)
    assert w.stop() == 0, w.log()


@pytest.mark.parametrize(
    ("mode", "content", "message"),
    [
        (0o644, "URL", "readable by group or others (mode 0644)"),
        (0o620, "URL", "writable by group or others"),
        (0o600, "mysql://x@y/z\n", "the fleet database is PostgreSQL"),
        (0o600, "URL\nURL\n", "holds 2 lines"),
    ],
)
def test_an_unsafe_or_bad_url_file_is_refused_before_anything_starts(
    tmp_path: Path, fleet_url: str, mode: int, content: str, message: str
) -> None:
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(74), 3).write(cp)
    urls = tmp_path / "fleet-url"
    urls.write_text(content.replace("URL", with_password(fleet_url)))
    urls.chmod(mode)
    db = tmp_path / "node.db"
    run = subprocess.run(
        [*podstore_command(), "--db", str(db), "watch", str(cp), "--ship-to-file", str(urls),
         "--node", "node-x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("podstore: error: fleet URL file ") and message in line, line
    assert SECRET not in run.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--ship-to", "postgresql://a@b/c", "--ship-to-env"],
        ["--ship-to-file", "f", "--ship-to-env"],
        ["--ship-to", "postgresql://a@b/c", "--ship-to-file", "f"],
    ],
)
def test_one_way_to_give_the_url(tmp_path: Path, args: list[str]) -> None:
    run = subprocess.run(
        [*podstore_command(), "--db", str(tmp_path / "n.db"), "watch", "--once", "cp", *args],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PODSTORE_FLEET_URL": "postgresql://a@b/c"},
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "give one of --ship-to" in run.stderr
    assert not (tmp_path / "n.db").exists()


def test_ship_to_env_without_the_variable_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PODSTORE_FLEET_URL"}
    run = subprocess.run(
        [*podstore_command(), "--db", str(tmp_path / "n.db"), "watch", "--once", "cp",
         "--ship-to-env"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "$PODSTORE_FLEET_URL is not set" in run.stderr
