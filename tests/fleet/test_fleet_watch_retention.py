"""``watch --keep-history`` with shipping, against a real PostgreSQL that goes down: the pruner
never removes an event the fleet database has not received, so when the server is back the
fleet gets every event itself (no snapshot over a gap)."""

from __future__ import annotations

import random
from pathlib import Path

from harness.fleetlib import assert_same_state, fleet_events, node_events
from harness.pgserver import PgServer
from harness.watch_support import checkpoint_path, mutate, random_state

from podstore import PodStore
from podstore.fleet.ship import ship
from podstore.watch.run import EXIT_FAILED, EXIT_OK, Watch, WatchConfig


def seqs(store: PodStore) -> list[int]:
    return [int(r[0]) for r in store.query("SELECT seq FROM allocation_events ORDER BY seq").rows]


def test_nothing_unshipped_is_pruned_while_the_fleet_is_down(
    tmp_path: Path, fleet_url: str, pg: PgServer
) -> None:
    rng = random.Random(81)
    cp = checkpoint_path(tmp_path)
    state = random_state(rng, 8)
    with PodStore.open(tmp_path / "node.db") as store:
        # keep_history 0: every event the fleet holds may go (but each entry's newest).
        watch = Watch(
            store,
            WatchConfig(checkpoint=str(cp), once=True, ship_to=fleet_url, node="node-r",
                        keep_history=0.0),
        )  # fmt: skip
        for _ in range(3):  # synced, shipped, pruned behind the fleet
            state.write(cp)
            assert watch.once() == EXIT_OK
            state = mutate(rng, state, 4)
        shipped = watch.shipping.snapshot().last_seq
        with store.reader() as reader:
            assert shipped == reader.high_water()
        assert watch.pruner is not None and watch.pruner.pruned > 0

        pg.stop()
        try:
            for _ in range(3):  # synced; the ship fails; the prune keeps what the fleet lacks
                state.write(cp)
                assert watch.once() == EXIT_FAILED
                state = mutate(rng, state, 4)
            unshipped = [s for s in seqs(store) if s > shipped]
            with store.reader() as reader:
                high = reader.high_water()
            # Every event after the fleet's last seq is still here: seqs are dense.
            assert unshipped == list(range(shipped + 1, high + 1))
            assert watch.shipping.snapshot().last_seq == shipped
            assert watch.shipping.snapshot().failures == 3
        finally:
            pg.start()

        # Back: the fleet receives the events themselves, not a snapshot over a gap.
        report = ship(store, fleet_url, node="node-r")
        assert report.snapshots == 0 and report.missing == 0
        assert report.shipped == high - shipped
        assert [e[0] for e in fleet_events(fleet_url, store.store_id)][-report.shipped :] == (
            list(range(shipped + 1, high + 1))
        )
        assert_same_state(fleet_url, store)
        assert (
            fleet_events(fleet_url, store.store_id)[-report.shipped :]
            == (node_events(store)[-report.shipped :])
        )


def test_a_watch_whose_fleet_never_answered_prunes_nothing(
    tmp_path: Path, fleet_url: str, pg: PgServer
) -> None:
    rng = random.Random(82)
    cp = checkpoint_path(tmp_path)
    state = random_state(rng, 8)
    with PodStore.open(tmp_path / "node.db") as store:
        for _ in range(3):
            state.write(cp)
            store.sync_checkpoint(cp)
            state = mutate(rng, state, 4)
        before = seqs(store)
        pg.stop()
        try:
            watch = Watch(
                store,
                WatchConfig(checkpoint=str(cp), once=True, ship_to=fleet_url, node="node-q",
                            keep_history=0.0),
            )  # fmt: skip
            state.write(cp)
            assert watch.once() == EXIT_FAILED
        finally:
            pg.start()
        after = seqs(store)
        assert after[: len(before)] == before and len(after) > len(before)
        assert watch.pruner is not None and watch.pruner.pruned == 0
