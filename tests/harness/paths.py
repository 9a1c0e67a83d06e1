"""Where the harness scripts are, and how a child Python finds the harness package.

pytest puts tests/ on ``sys.path`` (``pythonpath`` in pyproject.toml's pytest configuration),
which reaches only the test process: a child interpreter that imports ``harness`` gets tests/
through ``PYTHONPATH`` (:func:`child_env`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
TESTS_DIR = HARNESS_DIR.parent


def script(name: str) -> list[str]:
    """argv that runs tests/harness/NAME with this interpreter (pass ``env=child_env()`` when
    the script imports other harness modules)."""
    return [sys.executable, str(HARNESS_DIR / name)]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """BASE (default: this process's environment) with tests/ first on ``PYTHONPATH``."""
    env = dict(os.environ if base is None else base)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *([rest] if rest else [])])
    return env
