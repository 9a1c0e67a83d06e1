"""How podstore writes to stderr (``--log-format text|json``): the ``podstore`` logger's records
and the command line's one-line errors and warnings. ``json``: one object a line, ``time``
(UTC, ms), ``level``, ``logger``, ``message``, then the record's ``extra=`` fields and
``exception``. Standard library only, so that every layer may log through it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

#: The values of ``--log-format``.
FORMATS = ("text", "json")

#: The logger every podstore module logs to (or below: ``podstore.fleet``).
LOGGER = "podstore"

TEXT = "%(asctime)s %(levelname)s %(message)s"

# What every LogRecord carries: the rest of its attributes came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}

_format = "text"


def iso_time(seconds: float) -> str:
    """``seconds`` since the epoch as UTC ISO 8601 with milliseconds and a ``Z``."""
    whole = time.gmtime(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", whole) + f".{int(seconds % 1 * 1000):03d}Z"


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def json_line(level: str, logger: str, message: str, fields: dict[str, Any], at: float) -> str:
    obj: dict[str, Any] = {
        "time": iso_time(at),
        "level": level.lower(),
        "logger": logger,
        "message": message,
    }
    for key, value in fields.items():
        if key not in obj:
            obj[key] = _plain(value)
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exception"] = record.exc_text
        # A message that cannot be formatted is still a line, not a traceback on stderr.
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = f"{record.msg!s} {record.args!r}"
        return json_line(record.levelname, record.name, message, fields, record.created)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs, told apart from anyone else's."""


def set_format(fmt: str) -> None:
    """Choose the format of the error lines and of the handler (switched over at once)."""
    global _format
    if fmt not in FORMATS:
        raise ValueError(f"log format: expected one of {FORMATS}, got {fmt!r}")
    _format = fmt
    for handler in logging.getLogger(LOGGER).handlers:
        if isinstance(handler, _Handler):
            handler.setFormatter(_formatter(fmt))


def current() -> str:
    """The format chosen (``text`` until :func:`set_format`)."""
    return _format


def _formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT)


def configure(*, level: int = logging.INFO) -> None:
    """Send the ``podstore`` logger's records at ``level`` and above to stderr in the chosen
    format, replacing this function's earlier handler; records stop propagating to the root
    logger, so an application does not print them twice."""
    unconfigure()
    logger = logging.getLogger(LOGGER)
    handler = _Handler(sys.stderr)
    handler.setFormatter(_formatter(_format))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def unconfigure() -> None:
    """Remove the handler :func:`configure` installed."""
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):
        if isinstance(handler, _Handler):
            logger.removeHandler(handler)


def foreign_handlers() -> bool:
    """Whether an application gave the ``podstore`` logger a handler of its own."""
    return any(not isinstance(h, _Handler) for h in logging.getLogger(LOGGER).handlers)


def say(level: str, message: str, **fields: Any) -> None:
    """One line on stderr for the command line: ``podstore: LEVEL: message`` in text, a log
    object in json (``level`` is ``error`` or ``warning``)."""
    if _format == "json":
        line = json_line(level, LOGGER, message, fields, time.time())
    else:
        line = f"podstore: {level}: {message}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
