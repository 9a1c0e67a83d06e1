"""The options every command takes (``--db``, ``--readonly``, ``--busy-timeout``,
``--log-format``), before the command or after it. click parses a group's options only before
the sub-command's name, so each command gets a copy that writes into the shared
:class:`Context`; a value given after the command wins.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

import click

from podstore import logs
from podstore.cli.context import DEFAULT_DB, Context
from podstore.sqlite.busy import DEFAULT_BUSY_TIMEOUT, MAX_BUSY_TIMEOUT

DB_HELP = "The store: a file path or an sqlite:/// URL."
READONLY_HELP = "Open the store read-only; a command that would write it fails instead."
BUSY_HELP = "Seconds to wait for another writer's lock before failing."

LOG_FORMAT_HELP = (
    "How stderr looks: text, or json (one object a line: time, level, logger, message and "
    "the record's fields), for log collectors."
)

BUSY_TIMEOUT = click.FloatRange(0, MAX_BUSY_TIMEOUT)
LOG_FORMAT = click.Choice(logs.FORMATS)


def use_log_format(fmt: str) -> None:
    """Apply ``--log-format``: the error lines follow it, and in json the ``podstore``
    logger's warnings become objects too (``watch`` then logs at INFO in the same format)."""
    logs.set_format(fmt)
    if fmt == "json" and not logs.foreign_handlers():
        logs.configure(level=logging.WARNING)
    elif fmt == "text":
        logs.unconfigure()  # what a command printed before there was a choice


def _log_format(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        use_log_format(value)


def _setter(attribute: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False:
            return  # not given after the command: the group's value stands
        obj = ctx.find_object(Context)
        if obj is not None:
            setattr(obj, attribute, value)

    return callback


def global_options(group: bool) -> list[click.Option]:
    """The global options: the group's fill its parameters; a command's copies write into the
    shared Context, and only when given."""
    specs: list[tuple[list[str], str, Any, dict[str, Any]]] = [
        (["--db", "db"], "db", DEFAULT_DB, {"metavar": "PATH", "envvar": "PODSTORE_DB"}),
        (["--readonly"], "readonly", False, {"is_flag": True}),
        (
            ["--busy-timeout", "busy_timeout"],
            "busy_timeout",
            DEFAULT_BUSY_TIMEOUT,
            {"type": BUSY_TIMEOUT, "metavar": "SECONDS"},
        ),
        (["--log-format"], "", "text", {"type": LOG_FORMAT, "envvar": "PODSTORE_LOG_FORMAT"}),
    ]
    helps = (DB_HELP, READONLY_HELP, BUSY_HELP, LOG_FORMAT_HELP)
    out = []
    for (decls, attribute, default, kw), help_text in zip(specs, helps, strict=True):
        if not attribute:  # --log-format applies itself as it is parsed
            kw.update(expose_value=False, is_eager=True, callback=_log_format)
        if group:
            shown = default is not False
            kw.update(default=default, show_default=shown, show_envvar="envvar" in kw)
        else:
            kw.pop("envvar", None)
            kw.setdefault("callback", _setter(attribute))
            kw.update(default=None, expose_value=False)
        out.append(click.Option(decls, help=help_text, **kw))
    return out


def add_global_options(command: click.Command) -> None:
    """Give ``command`` (and, for a group, its commands so far) the global options it does
    not define itself."""
    taken = {opt for p in command.params for opt in getattr(p, "opts", ())}
    command.params.extend(o for o in global_options(False) if not taken & set(o.opts))
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)


def asked_log_format(args: Sequence[str]) -> str:
    """The ``--log-format`` the command line asks for, else the environment's, else the one in
    force (a usage error can stop the parse before the option's callback ran)."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--log-format" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--log-format="):
            found = arg.partition("=")[2]
    return found or os.environ.get("PODSTORE_LOG_FORMAT") or logs.current()


class JsonUsageError(click.UsageError):
    """A usage error shown as one JSON object on stderr (``--log-format json``), exit 2."""

    def __init__(self, cause: click.UsageError) -> None:
        super().__init__(cause.format_message(), cause.ctx)

    def show(self, file: Any = None) -> None:
        usage = self.ctx.get_usage() if self.ctx is not None else None
        logs.set_format("json")  # asked for on a command line whose parse this error stopped
        logs.say("error", self.format_message(), error="UsageError", usage=usage)


_ARGS_KEY = "podstore.args"


class PodstoreGroup(click.Group):
    """A group whose commands take the global options after their name too, whose usage
    errors follow ``--log-format``, and whose ``lazy`` commands (name → ``"module:attribute"``)
    are imported when first asked for (docs/performance.md, "Start-up")."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.lazy.get(cmd_name)
        if where is not None and cmd_name not in self.commands:
            module, attribute = where.split(":")
            self.add_command(getattr(import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        add_global_options(cmd)
        super().add_command(cmd, name)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            ctx = super().make_context(info_name, list(args), parent, **extra)
        except click.UsageError as exc:
            raise _shown(exc, args) from None
        ctx.meta.setdefault(_ARGS_KEY, list(args))
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _shown(exc, ctx.meta.get(_ARGS_KEY, [])) from None


def _shown(exc: click.UsageError, args: Sequence[str]) -> click.UsageError:
    if isinstance(exc, JsonUsageError) or asked_log_format(args) != "json":
        return exc
    return JsonUsageError(exc)
