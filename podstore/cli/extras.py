"""Commands that need an optional dependency say so in one line (exit status 2) instead of a
traceback: ``podstore[watch]`` brings watchdog and prometheus_client, ``podstore[fleet]`` the
PostgreSQL driver."""

from __future__ import annotations

import importlib
import sys

from podstore import logs

#: The exit status of a missing optional extra: a usage error (README "Exit codes").
EXIT_MISSING_EXTRA = 2


def require(module: str, what: str, extra: str = "watch") -> None:
    """Exit 2 with an install hint unless ``module`` can be imported (imported for real: a
    package that is found but broken counts as missing)."""
    try:
        importlib.import_module(module)
    except ImportError:
        logs.say(
            "error",
            f"{what} needs the {module} package: "
            f"install podstore[{extra}] (pip install 'podstore[{extra}]')",
            extra=extra,
        )
        sys.exit(EXIT_MISSING_EXTRA)
