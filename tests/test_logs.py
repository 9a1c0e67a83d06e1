"""``--log-format text|json``: the follower's log, the one-line errors and the missing-extra
line as JSON objects, one a line, for log collectors; text stays what it was. Real
subprocesses (what an operator's collector reads is the process's stderr)."""

from __future__ import annotations

import json
import logging
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.cli import podstore
from harness.watch_support import WatchProcess, checkpoint_path, mutate, random_state

from podstore import logs

KEYS = ["time", "level", "logger", "message"]


def objects(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line as a JSON object (fails on a line that is not one)."""
    out = []
    for line in stderr.splitlines():
        obj = json.loads(line)
        assert isinstance(obj, dict), line
        assert list(obj)[:4] == KEYS, line
        assert obj["time"].endswith("Z") and "T" in obj["time"]
        out.append(obj)
    return out


def test_watch_once_logs_json_objects_with_the_sync_fields(tmp_path: Path) -> None:
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(41), 5).write(cp)
    run = podstore("--log-format", "json", "--db", str(tmp_path / "s.db"), "watch", "--once",
                   str(cp), cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (applied,) = [o for o in objects(run.stderr) if o.get("event") == "sync"]
    assert applied["level"] == "info" and applied["logger"] == "podstore"
    assert applied["message"].startswith(f"applied {cp} in ")
    assert applied["result"] == "applied" and applied["checkpoint"] == str(cp)
    assert applied["inserted"] > 0 and applied["deleted"] == 0
    assert isinstance(applied["seconds"], float)


def test_a_following_watch_logs_json_after_the_command_too(tmp_path: Path) -> None:
    rng = random.Random(42)
    cp = checkpoint_path(tmp_path)
    state = random_state(rng, 5)
    state.write(cp)
    w = WatchProcess(tmp_path / "s.db", cp, "--log-format", "json", "--interval", "0.5",
                     log=tmp_path / "w.log")  # fmt: skip
    try:
        w.wait_log('"event": "start"')
        cp.write_bytes(b'{"Data":')  # a bad file: a warning with its result
        w.wait_log('"result": "invalid"')
        mutate(rng, state, 2).write(cp)
        w.wait_log("good again")
    finally:
        assert w.stop() == 0
    found = objects(w.log_path.read_text())
    events = [o.get("event") for o in found]
    assert events[0] == "start" and events[-1] == "stop"
    (bad,) = [o for o in found if o.get("result") == "invalid"]
    assert bad["level"] == "warning" and "store left as it was" in bad["message"]


@pytest.mark.parametrize("where", ["before", "after", "env"])
def test_errors_are_json_objects_with_their_type(tmp_path: Path, where: str) -> None:
    db = tmp_path / "s.db"
    assert podstore("--db", str(db), "migrate", "upgrade", cwd=tmp_path).returncode == 0
    args = ["--db", str(db), "get", "no-such-pod"]
    env = None
    if where == "before":
        args = ["--log-format", "json", *args]
    elif where == "after":
        args = [*args, "--log-format", "json"]
    else:
        env = {"PODSTORE_LOG_FORMAT": "json"}
    run = podstore(*args, cwd=tmp_path, env=env)
    assert run.returncode == 1
    (obj,) = objects(run.stderr)
    assert obj["level"] == "error" and "no-such-pod" in obj["message"]

    run = podstore("--log-format", "json", "--db", str(tmp_path / "nodir" / "x.db"), "pods",
                   cwd=tmp_path)  # fmt: skip
    assert run.returncode == 1
    (obj,) = objects(run.stderr)
    assert obj["level"] == "error" and obj["error"] == "InvalidInputError"
    assert obj["message"].endswith("does not exist (opened read-only)")


def test_text_stays_the_default(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert podstore("--db", str(db), "migrate", "upgrade", cwd=tmp_path).returncode == 0
    run = podstore("--db", str(db), "get", "no-such-pod", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.startswith("podstore: error: ") and "{" not in run.stderr
    cp = checkpoint_path(tmp_path)
    random_state(random.Random(43), 3).write(cp)
    run = podstore("--db", str(db), "watch", "--once", str(cp), cwd=tmp_path)
    assert run.returncode == 0
    (line,) = run.stderr.splitlines()
    assert " INFO applied " in line


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--log-format", "json", "sql"], None, "Missing argument 'QUERY'"),
        (["pods", "--log-format", "json", "--bogus"], None, "No such option '--bogus'"),
        (["--log-format=json", "nope"], None, "No such command 'nope'"),
        (["export"], {"PODSTORE_LOG_FORMAT": "json"}, "Missing argument 'FILE'"),
        (["--log-format", "json", "fleet", "nodes", "--bogus"], None, "--bogus"),
        (["export", "--kind", "cpu", "--boot-id", "x", "f", "--log-format", "json"], None,
         "--boot-id is for device checkpoints"),
    ],
)  # fmt: skip
def test_usage_errors_follow_the_log_format(
    tmp_path: Path, args: list[str], env: dict[str, str] | None, words: str
) -> None:
    """A usage error is one JSON object too (exit 2 as ever), also when it stops the parse
    before the option that asked for JSON was applied."""
    db = tmp_path / "s.db"
    assert podstore("--db", str(db), "migrate", "upgrade", cwd=tmp_path).returncode == 0
    run = podstore("--db", str(db), *args, cwd=tmp_path, env=env)
    assert run.returncode == 2
    (obj,) = objects(run.stderr)
    assert obj["level"] == "error" and obj["error"] == "UsageError", obj
    assert words in obj["message"] and obj["usage"].startswith("Usage: podstore")
    text = podstore("--db", str(db), *[a for a in args if "json" not in a and a != "--log-format"],
                    cwd=tmp_path)  # fmt: skip
    assert text.returncode == 2 and "{" not in text.stderr and words in text.stderr


def test_a_bad_log_format_is_a_usage_error(tmp_path: Path) -> None:
    run = podstore("--log-format", "xml", "pods", cwd=tmp_path)
    assert run.returncode == 2 and "'xml' is not one of" in run.stderr


# ---- the formatter -----------------------------------------------------------------------------


def test_json_formatter_fields_exceptions_and_odd_values() -> None:
    formatter = logs.JsonFormatter()
    record = logging.LogRecord("podstore.fleet", logging.ERROR, "f.py", 1, "%s of %d", ("a", 2),
                               None)  # fmt: skip
    record.__dict__.update({"path": Path("/x"), "events": 3, "nested": {"k": (1, 2)}})
    obj = json.loads(formatter.format(record))
    assert obj["message"] == "a of 2" and obj["logger"] == "podstore.fleet"
    assert obj["level"] == "error"
    assert obj["path"] == "/x" and obj["events"] == 3 and obj["nested"] == {"k": [1, 2]}
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("podstore", logging.ERROR, "f.py", 1, "failed", (),
                                   sys.exc_info())  # fmt: skip
    obj = json.loads(formatter.format(record))
    assert "ValueError: boom" in obj["exception"]
    # A message whose arguments do not fit is still one object.
    record = logging.LogRecord("podstore", logging.INFO, "f.py", 1, "%d", ("x",), None)
    assert json.loads(formatter.format(record))["message"].startswith("%d")
    # Newlines stay inside the object: one record, one line.
    record = logging.LogRecord("podstore", logging.INFO, "f.py", 1, "two\nlines", (), None)
    assert "\n" not in formatter.format(record)
