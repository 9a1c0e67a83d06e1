"""One round of the fork torture (tests/test_embed_torture.py).

``fork_torture.py keeper DB LOGDIR SEED``: the keeper makes itself the subreaper of everything
below it, starts the round's root process and waits until every descendant has exited (also
the orphans of killed parents), then exits.

Every process of the round (the root, and every child forked from it or from another child)
runs the same routine on the store: a writer thread beside the main one, random inserts,
transaction blocks, deletes of its own earlier pods, closing and reopening the store, reading,
forking (plainly, while its writer thread is inside a transaction, while a thread holds a
reader's snapshot, or from inside a transaction of its own), sometimes killing itself with
SIGKILL. The test SIGKILLs processes from outside too.

Each process appends one line per acknowledged call to ``LOGDIR/acks-PID.log`` — only after
the call returned (``I pod dev``, ``T pod dev pod dev …`` for a block, ``D pod``; a delete
is announced with ``d pod`` before the call, as one cut short may or may not have happened),
plus ``R``
when, as a child forked inside a transaction, it was refused as documented, ``F`` for a fork,
``K`` before it kills itself, ``Z`` when its routine ended, and ``E message`` for anything
unexpected. Pod names are unique per process and thread, so
the test can check every acknowledged write against the final store.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import os
import random
import signal
import sys
import threading
import time
import traceback

from podstore import PodStore, PodStoreError

RES = "vendor.com/gpu"
BUSY_TIMEOUT = 30.0
MAX_DEPTH = 2
MAX_FORKS = 3  # per process: at most 1 + 3 + 9 processes a round
PR_SET_CHILD_SUBREAPER = 36


class Worker:
    """One process of the round."""

    def __init__(self, db: str, logdir: str, rng: random.Random, depth: int) -> None:
        self.db, self.logdir, self.rng, self.depth = db, logdir, rng, depth
        self.pid = os.getpid()
        self.log = os.open(
            os.path.join(logdir, f"acks-{self.pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        with open(os.path.join(logdir, "pids"), "a") as f:
            f.write(f"{self.pid}\n")
        self.store: PodStore | None = None
        self.store_lock = threading.Lock()
        self.faults = open(os.path.join(logdir, f"faults-{self.pid}.txt"), "w")  # noqa: SIM115
        faulthandler.enable(self.faults, all_threads=True)
        # SIGUSR1 (the test sends it to a round that overruns) writes every thread's stack.
        faulthandler.register(signal.SIGUSR1, self.faults, all_threads=True)
        self.children: list[int] = []
        self.forks_left = MAX_FORKS
        self.serial = 0

    def note(self, line: str) -> None:
        os.write(self.log, (line + "\n").encode())

    def name(self, thread: str) -> tuple[str, str]:
        self.serial += 1
        return f"p{self.pid}-{thread}-{self.serial}", f"d{self.pid}-{thread}-{self.serial}"

    def open(self) -> PodStore:
        verify = self.rng.choice(["auto", "auto", "blocking", "off"])
        return PodStore.open(self.db, busy_timeout=BUSY_TIMEOUT, verify=verify)  # type: ignore[arg-type]

    # ---- the calls -----------------------------------------------------------------------------

    def one_call(self, store: PodStore, rng: random.Random, mine: list[str], thread: str) -> None:
        roll = rng.random()
        if roll < 0.45:
            pod, dev = self.name(thread)
            store.insert(pod, "c", RES, {0: [dev]}, b"")
            self.note(f"I {pod} {dev}")
            mine.append(pod)
        elif roll < 0.65:
            pairs = [self.name(thread) for _ in range(rng.randint(2, 4))]
            with store.transaction():
                for pod, dev in pairs:
                    store.insert(pod, "c", RES, {0: [dev]}, b"")
            self.note("T " + " ".join(f"{p} {d}" for p, d in pairs))
            mine.extend(p for p, _ in pairs)
        elif roll < 0.75 and mine:
            pod = mine.pop(rng.randrange(len(mine)))
            self.note(f"d {pod}")  # about to delete: if it never returns, either outcome
            store.delete([pod])
            self.note(f"D {pod}")
        else:
            store.pods()

    def writer(self, seed: int, stop: threading.Event) -> None:
        rng = random.Random(seed)
        mine: list[str] = []
        while not stop.is_set():
            store = self.store
            if store is None:
                time.sleep(0.002)
                continue
            try:
                self.one_call(store, rng, mine, "w")
            except PodStoreError as exc:
                if "closed" in str(exc):  # the main thread is reopening it
                    continue
                self.note(f"E writer: {type(exc).__name__}: {exc}")
                return
            time.sleep(rng.random() * 0.003)

    # ---- forks ---------------------------------------------------------------------------------

    def fork(self, how: str) -> None:
        store = self.store
        assert store is not None
        seed = self.rng.randrange(1 << 30)
        if how == "inside-transaction":
            pod, dev = self.name("m")
            with store.transaction():
                store.insert(pod, "c", RES, {0: [dev]}, b"")
                pid = os.fork()
                if pid == 0:
                    self.child_refused(store)
            self.note(f"T {pod} {dev}")
        elif how == "while-reading":
            held, done = threading.Event(), threading.Event()

            def hold() -> None:
                with store.reader() as reader:
                    list(reader.stream("SELECT count(*) FROM pods"))
                    held.set()
                    done.wait(1)

            t = threading.Thread(target=hold)
            t.start()
            held.wait(10)
            pid = os.fork()
            if pid == 0:
                self.child(seed)
            done.set()
            t.join()
        else:  # plain: the writer thread is likely inside a call or a block meanwhile
            pid = os.fork()
            if pid == 0:
                self.child(seed)
        self.children.append(pid)
        self.note(f"F {pid} {how}")

    def child_refused(self, store: PodStore) -> None:  # pragma: no cover - in the child
        code = 0
        try:
            Worker.__init__(self, self.db, self.logdir, random.Random(), self.depth + 1)
            try:
                store.pods()
                self.note("E a child forked inside a transaction could use the store")
                code = 1
            except PodStoreError as exc:
                self.note("R" if "fork" in str(exc) else f"E refused oddly: {exc}")
        finally:
            os._exit(code)

    def child(self, seed: int) -> None:  # pragma: no cover - in the child
        # The child must never return into its parent's frames (it would carry on with the
        # parent's work): it ends here, with os._exit, after its own routine.
        try:
            inherited = self.store
            Worker.__init__(self, self.db, self.logdir, random.Random(seed), self.depth + 1)
            self.store = inherited if self.rng.random() < 0.6 else None
            del inherited
            self.run()
        except SystemExit:
            pass
        except BaseException as exc:
            self.note(f"E child: {type(exc).__name__}: {exc}")
        finally:
            # Sometimes drop the store and collect, as an exiting interpreter would: what the
            # child inherited must not be closed in a way that touches the parent's files.
            if self.rng.random() < 0.5:
                self.store = None
                gc.collect()
            os._exit(0)

    # ---- the routine ---------------------------------------------------------------------------

    def run(self) -> None:
        code = 0
        stop = threading.Event()
        writer = threading.Thread(target=self.writer, args=(self.rng.randrange(1 << 30), stop))
        try:
            if self.store is None:
                self.store = self.open()
            writer.start()
            mine: list[str] = []
            for _ in range(self.rng.randint(40, 100)):
                roll = self.rng.random()
                if roll < 0.004:
                    self.note("K")
                    os.kill(os.getpid(), signal.SIGKILL)
                elif roll < 0.08:
                    with self.store_lock:
                        old, self.store = self.store, None
                        old.close()
                        self.store = self.open()
                elif roll < 0.12 and self.depth < MAX_DEPTH and self.forks_left:
                    self.forks_left -= 1
                    how = self.rng.choice(["plain", "plain", "while-reading", "inside-transaction"])
                    self.fork(how)
                else:
                    assert self.store is not None
                    self.one_call(self.store, self.rng, mine, "m")
                time.sleep(self.rng.random() * 0.004)
        except BaseException as exc:
            self.note(f"E main: {type(exc).__name__}: {exc} {traceback.format_exc()!r}")
            code = 1
        finally:
            self.note("Z")
            stop.set()
            if writer.is_alive():
                writer.join(60)
            for pid in self.children:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            if self.rng.random() < 0.5 and self.store is not None:
                self.store.close()
            if self.rng.random() < 0.5:
                os._exit(code)  # no interpreter shutdown
        sys.exit(code)


def keeper(db: str, logdir: str, seed: int) -> None:
    """Subreaper of the round: start the root, wait for every descendant."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    pid = os.fork()
    if pid == 0:
        try:
            Worker(db, logdir, random.Random(seed), 0).run()
        finally:
            os._exit(1)
    with open(os.path.join(logdir, "exits"), "a") as exits:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return
            exits.write(f"{pid} {status}\n")


if __name__ == "__main__":
    keeper(sys.argv[2], sys.argv[3], int(sys.argv[4]))
