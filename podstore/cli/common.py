"""Pieces shared by the audit commands: time arguments, "not found", shell completion."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from click.shell_completion import CompletionItem

from podstore import logs
from podstore.cli.context import DEFAULT_DB
from podstore.errors import InvalidInputError, PodStoreError
from podstore.pure.times import parse_time as parse_time_argument


def parse_time(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Option callback: an ISO 8601 time (``2026-12-02T10:32:00Z``; no offset: UTC) in stored
    form; a bad one is a usage error (exit status 2)."""
    if value is None:
        return None
    try:
        return parse_time_argument(value, "time")
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc).removeprefix("time: ")) from None


def not_found(message: str) -> NoReturn:
    """Exit 1 with ``message`` on stderr (what `get` of an unknown pod does)."""
    logs.say("error", message)
    sys.exit(1)


def _completion_store(ctx: click.Context) -> Any:
    from podstore.store import PodStore

    db = ctx.find_root().params.get("db") or DEFAULT_DB  # --db, else $PODSTORE_DB (click)
    # A key press must not wait for the open-time check of every page.
    return PodStore.open(db, readonly=True, verify="off")


def complete_pods(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Pod UIDs of the store named by --db (nothing when it cannot be read)."""
    try:
        with _completion_store(ctx) as store:
            uids = sorted(store.pods())
    except (PodStoreError, OSError):
        return []
    return [CompletionItem(u) for u in uids if u.startswith(incomplete)]


def complete_containers(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Container names of the pod given before (nothing when it cannot be read)."""
    pod = ctx.params.get("pod_uid")
    if not pod:
        return []
    try:
        with _completion_store(ctx) as store, store.reader() as reader:
            names = list(reader.containers(pod))
    except (PodStoreError, OSError):
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]
