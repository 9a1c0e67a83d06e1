"""Where the harness scripts are, and a way to run them with the test's interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent


def script(name: str) -> list[str]:
    """argv that runs tests/harness/NAME with this interpreter."""
    return [sys.executable, str(HARNESS_DIR / name)]
