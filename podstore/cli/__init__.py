"""The ``podstore`` command line."""

from podstore.cli.main import cli, main

__all__ = ["cli", "main"]
