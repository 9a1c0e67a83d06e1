"""``--kubelet-version`` and ``--feature-gates`` for the commands that judge for a release
(preflight, watch): parsed when given, a usage error (exit 2) naming the known range when not
acceptable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _release(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    from podstore.checkpoint.releases import parse_release
    from podstore.errors import InvalidInputError

    try:
        return parse_release(value)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from None


def _gates(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict[str, bool]:
    if not value:
        return {}
    from podstore.checkpoint.releases import parse_gates
    from podstore.errors import InvalidInputError

    try:
        gates: dict[str, bool] = parse_gates(value)
        return gates
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from None


def release_options(*, required: bool, help: str) -> Callable[[F], F]:
    """Add ``--kubelet-version`` (the parsed release, or None) and ``--feature-gates`` (a
    dict, empty when not given)."""

    def add(fn: F) -> F:
        fn = click.option(
            "--feature-gates",
            metavar="NAME=BOOL,...",
            callback=_gates,
            help="Feature gates as kubelet spells them; they change only what a release writes.",
        )(fn)
        return click.option(
            "--kubelet-version",
            metavar="1.N|newest|any",
            required=required,
            callback=_release,
            help=help,
        )(fn)

    return add
