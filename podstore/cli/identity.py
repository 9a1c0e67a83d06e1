"""``podstore reset-identity``: give a copied store a store_id of its own."""

from __future__ import annotations

import sys

import click

from podstore.cli.context import Context


@click.command("reset-identity")
@click.option("--yes", is_flag=True, help="Make the change without asking.")
@click.pass_obj
def reset_identity(ctx: Context, yes: bool) -> None:
    """Give the store a new store_id and re-chain its history from the new genesis.

    For a store file copied from another node (a cloned VM image, cp): until it has an id of
    its own, the fleet database takes it for the original. Every event keeps its content and
    seq; the hashes change, in one transaction. Without --yes it says what it would do and
    exits 1, changing nothing; a history whose chain does not verify is refused.
    """
    store = ctx.store(readonly=True)  # a missing store is an error, never created here
    old_id = store.store_id
    report = store.verify_history()
    if not yes:
        click.echo(
            f"{store.path}: store_id {old_id}, {report.events:,} history events\n"
            "reset-identity gives the store a new store_id (a random UUID) and re-chains "
            "every history event's hash from it, in one transaction; the fleet database then "
            "sees a new store, and the old id stays with the original.\n"
            + (
                ""
                if report.ok
                else "its history chain does not verify (`podstore verify` lists the breaks): "
                "the reset would be refused, since re-chaining would hide them\n"
            )
            + "nothing was changed; run again with --yes to do it",
            err=True,
        )
        sys.exit(1)
    new_id = ctx.store().reset_identity()
    click.echo(f"store_id {new_id} (was {old_id}); {report.events:,} events re-chained")
