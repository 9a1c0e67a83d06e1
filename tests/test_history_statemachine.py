"""History under random operations: the event log always replays to the store's state.

A hypothesis state machine drives inserts (new and replacing), deletes, kubelet restores
(from_checkpoint_data, including entries kubelet skips), checkpoint imports (replacing and
merging), registered-device changes, transactions rolled back on purpose, pruning, and a wall
clock that moves forward and sometimes back. After every step:

- replaying ``store.history()`` from empty gives exactly the store's entries and registered
  devices (also after pruning);
- seq strictly increases and time never decreases along the log;
- ``owners_at(device, now)`` equals the current holders of the device;
- a rolled-back transaction left the log exactly as it was;
- the hash chain holds (``verify_history``, and every hash recomputed here from what it chains
  from), and every event's ``released`` is what the entry held before it and no longer holds
  (checked from the replayed state wherever the log still shows that state).

At the end, ``owners_at`` is checked at every instant the run passed through since the last
prune cut, against the holders recorded at that instant.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podstore import ContainerAllocateResponse, PodDevicesEntry, PodStore
from podstore.checkpoint import dumps_checkpoint
from podstore.pure import chain, times
from podstore.storage import events
from podstore.storage.entries import current_entries, current_registered
from podstore.storage.events import replay

PODS = ["p0", "p1", "p2"]
CONTAINERS = ["c0", "c1"]
RESOURCES = ["r/a", "r/b"]
DEVICES = ["d0", "d1", "d2", "d3"]
RESP = ContainerAllocateResponse(envs={"A": "1"}).SerializeToString()
START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)

device_lists = st.one_of(st.none(), st.lists(st.sampled_from(DEVICES), max_size=3))
numa_maps = st.one_of(
    st.none(), st.dictionaries(st.sampled_from([-1, 0, 1]), device_lists, max_size=3)
)
entries = st.builds(
    PodDevicesEntry,
    st.sampled_from(PODS),
    st.sampled_from(CONTAINERS),
    st.sampled_from(RESOURCES),
    numa_maps,
    st.sampled_from([RESP, b"", b"\xff\xff"]),  # the last one does not decode: skipped
)
import_entries = st.builds(
    PodDevicesEntry,
    st.sampled_from(PODS),
    st.sampled_from(CONTAINERS),
    st.sampled_from(RESOURCES),
    numa_maps,
    st.sampled_from([RESP, b""]),
)
registered = st.dictionaries(st.sampled_from([*RESOURCES, "r/c"]), device_lists, max_size=3)


class HistoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="podstore-history-"))
        self.now = START
        self._saved_clock = events.utcnow
        events.utcnow = self.clock
        self.store = PodStore.open(self.dir / "s.db", durability="normal")
        self.conn = sqlite3.connect(self.dir / "s.db")
        self.cut = ""  # the latest prune cut, stored form
        # last event ts → holders of every device at that instant
        self.snapshots: dict[str, dict[str, list[tuple[str, str, str]]]] = {}
        self.files = 0
        self.seen_seq = 0

    def teardown(self) -> None:
        try:
            self.check_owners_at_every_recorded_instant()
        finally:
            events.utcnow = self._saved_clock
            self.conn.close()
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- the clock -------------------------------------------------------------------------

    def clock(self) -> datetime:
        """Each write reads the time once; a second passes per write, more with tick()."""
        self.now += timedelta(seconds=1)
        return self.now

    @rule(seconds=st.integers(min_value=1, max_value=4000))
    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(seconds=st.integers(min_value=1, max_value=600))
    def clock_steps_back(self, seconds: int) -> None:
        self.now -= timedelta(seconds=seconds)

    # ---- changes ---------------------------------------------------------------------------

    @rule(entry=entries, as_message=st.booleans())
    def insert(self, entry: PodDevicesEntry, as_message: bool) -> None:
        resp: object = None if entry.alloc_resp == b"\xff\xff" else entry.alloc_resp
        if as_message and isinstance(resp, bytes):
            msg = ContainerAllocateResponse()
            msg.ParseFromString(resp)
            resp = msg
        self.store.insert(
            entry.pod_uid,
            entry.container_name,
            entry.resource_name,
            entry.device_ids,
            resp,  # type: ignore[arg-type]
        )

    @rule(pods=st.lists(st.sampled_from([*PODS, "nobody"]), max_size=3))
    def delete(self, pods: list[str]) -> None:
        self.store.delete(pods)

    @rule(batch=st.lists(entries, max_size=6), bulk=st.booleans())
    def from_checkpoint_data(self, batch: list[PodDevicesEntry], bulk: bool) -> None:
        if bulk:  # over 64 entries: the executemany path (write_many)
            batch = batch + [
                PodDevicesEntry(f"bulk{i}", "c", "r/a", {0: [DEVICES[i % 4]]}, RESP)
                for i in range(65)
            ]
        self.store.from_checkpoint_data(batch)

    @rule(mapping=st.one_of(st.none(), registered))
    def set_registered_devices(self, mapping: dict[str, list[str] | None] | None) -> None:
        self.store.set_registered_devices(mapping)

    @rule(
        batch=st.lists(import_entries, max_size=5),
        mapping=registered,
        merge=st.sampled_from([True, False]),
    )
    def import_checkpoint(
        self, batch: list[PodDevicesEntry], mapping: dict[str, list[str] | None], merge: bool
    ) -> None:
        self.files += 1
        path = self.dir / f"cp{self.files}"
        path.write_bytes(dumps_checkpoint(batch, mapping))
        self.store.import_checkpoint(path, merge=merge)

    @rule(batch=st.lists(import_entries, max_size=5), mapping=registered)
    def sync_checkpoint(
        self, batch: list[PodDevicesEntry], mapping: dict[str, list[str] | None]
    ) -> None:
        self.files += 1
        path = self.dir / f"sync{self.files}"
        path.write_bytes(dumps_checkpoint(batch, mapping))
        self.store.sync_checkpoint(path)

    @rule(entry=entries, pods=st.lists(st.sampled_from(PODS), max_size=2), mapping=registered)
    def rolled_back_transaction(
        self, entry: PodDevicesEntry, pods: list[str], mapping: dict[str, list[str] | None]
    ) -> None:
        before = self.store.history()
        try:
            with self.store.transaction():
                self.store.insert(
                    entry.pod_uid, entry.container_name, entry.resource_name, entry.device_ids, None
                )
                self.store.delete(pods)
                self.store.set_registered_devices(mapping)
                raise _Rollback
        except _Rollback:
            pass
        assert self.store.history() == before

    @rule(entry=entries)
    def committed_transaction(self, entry: PodDevicesEntry) -> None:
        with self.store.transaction():
            self.store.insert(
                entry.pod_uid, entry.container_name, entry.resource_name, entry.device_ids, None
            )
            self.store.delete([entry.pod_uid])
            self.store.insert(entry.pod_uid, "after", entry.resource_name, entry.device_ids, b"")

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def prune(self, data: st.DataObject) -> None:
        instants = sorted(self.snapshots, reverse=True)  # the simplest draw: the latest
        cut = times.parse_ts(data.draw(st.sampled_from(instants)))
        # Cutting just after an instant prunes the events at it too.
        cut += data.draw(st.sampled_from([timedelta(microseconds=1), timedelta(0)]))
        # The retention rule, in plain Python: per entry (or registered resource), the latest
        # event before the cut stays if it left the key present; everything else before goes.
        before = self.store.history()
        latest = {}
        for ev in before:
            if ev.timestamp < cut:
                latest[(ev.pod_uid, ev.container_name, ev.resource_name)] = ev
        keep = {ev.seq for ev in latest.values() if ev.op not in ("delete", "unregistered")}
        expected = [ev for ev in before if ev.timestamp >= cut or ev.seq in keep]
        assert self.store.prune_history(before=cut) == len(before) - len(expected)
        assert self.store.history() == expected
        self.cut = max(self.cut, times.format_ts(cut))

    # ---- checks ----------------------------------------------------------------------------

    def holders(self) -> dict[str, list[tuple[str, str, str]]]:
        rows = self.conn.execute(
            "SELECT device_id, pod_uid, container, resource FROM v_device_owners "
            "ORDER BY pod_uid, container, resource"
        ).fetchall()
        out: dict[str, list[tuple[str, str, str]]] = {d: [] for d in DEVICES}
        for device, pod, container, resource in rows:
            out.setdefault(device, []).append((pod, container, resource))
        return out

    @invariant()
    def replay_reproduces_the_state(self) -> None:
        events = self.store.history()
        state = replay(events)
        assert state.entries == current_entries(self.conn)
        assert state.registered == current_registered(self.conn)
        seqs = [e.seq for e in events]
        assert seqs == sorted(set(seqs))
        times = [e.timestamp for e in events]
        assert times == sorted(times)

    @invariant()
    def the_chain_holds(self) -> None:
        report = self.store.verify_history()
        assert report.ok, report.breaks
        rows = self.conn.execute(
            "SELECT seq, ts, op, pod_uid, container, resource, device_ids, released, hash "
            "FROM allocation_events ORDER BY seq"
        ).fetchall()
        for seq, *fields, digest in rows:
            assert digest == chain.link(events.prev_hash(self.conn, seq), seq, *fields), seq
        assert events.head(self.conn) == (report.head_seq, report.head_hash)

    @invariant()
    def released_is_what_the_entry_gave_up(self) -> None:
        state: dict[tuple[str, str, str], set[str]] = {}
        for ev in self.store.history():
            if ev.pod_uid is None:
                assert ev.released == []
                continue
            assert ev.container_name is not None
            key = (ev.pod_uid, ev.container_name, ev.resource_name)
            now = ev.devices
            # Before the last prune cut an event's predecessor may be gone: it carried the
            # state at the cut, which the log no longer shows.
            if times.format_ts(ev.timestamp) >= self.cut:
                if ev.op == "delete" or key not in state:
                    assert ev.released == [], ev
                else:
                    assert ev.released == sorted(state[key] - now), ev
            if ev.op == "delete":
                state.pop(key, None)
            else:
                state[key] = now

    @invariant()
    def owners_now(self) -> None:
        # Events of this step stamped with an instant already recorded (the clock stepped back,
        # so they share the previous step's time) change what was held "at" that instant.
        first_new, last_seq = self.conn.execute(
            "SELECT min(ts), max(seq) FROM allocation_events WHERE seq > ?", (self.seen_seq,)
        ).fetchone()
        if first_new is not None:
            self.snapshots = {t: h for t, h in self.snapshots.items() if t < first_new}
            self.seen_seq = last_seq
        row = self.conn.execute("SELECT max(ts) FROM allocation_events").fetchone()
        if row[0] is None:
            return
        holders = self.holders()
        self.snapshots[row[0]] = holders
        for device in DEVICES:
            assert self.store.owners_at(device, row[0]) == holders[device], device

    def check_owners_at_every_recorded_instant(self) -> None:
        for instant, holders in self.snapshots.items():
            if instant < self.cut:
                continue  # before the prune cut only the kept events are known
            for device in DEVICES:
                assert self.store.owners_at(device, instant) == holders[device], (instant, device)


class _Rollback(Exception):
    pass


HistoryMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_history_state_machine = HistoryMachine.TestCase
