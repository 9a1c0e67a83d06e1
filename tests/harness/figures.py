"""Figures the reliability harnesses report (printed; also appended to $PODSTORE_FIGURES)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def report(harness: str, **figures: Any) -> None:
    """Print one line of figures; with PODSTORE_FIGURES set, append it there as JSON."""
    line = {"harness": harness, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}
    print(f"[reliability] {json.dumps(line, sort_keys=False)}", file=sys.stderr)
    target = os.environ.get("PODSTORE_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
