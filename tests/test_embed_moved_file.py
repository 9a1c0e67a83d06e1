"""A store whose file is moved, deleted or replaced while it is open.

Each thread's first call opens a connection by the store's path. Before, once the directory
was renamed, a new thread's call created a fresh empty file (and directory) at the old path and
failed with "no such table: pods"; a file put in the store's place was opened as if it were
the store, so writes went to two files by thread. Now a new connection is refused unless the
path still names the file the store opened (docs/api.md, "Threads, processes and fork").
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from podstore import PodStore, PodStoreError

RES = "vendor.com/gpu"


def _in_new_thread(store: PodStore) -> BaseException | set[str]:
    out: list[BaseException | set[str]] = []

    def run() -> None:
        try:
            out.append(store.pods())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def test_a_moved_store_is_refused_to_new_threads_and_nothing_is_created(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "a", tmp_path / "b"
    store = PodStore.open(old_dir / "store.db")
    try:
        store.insert("p1", "c", RES, {0: ["d1"]}, b"")
        old_dir.rename(new_dir)

        found = _in_new_thread(store)
        assert isinstance(found, PodStoreError)
        assert "deleted or moved away" in str(found)
        assert not old_dir.exists()  # neither the directory nor a file made again

        # The thread that opened it still writes to the store's own file, now at b/.
        store.insert("p2", "c", RES, {0: ["d2"]}, b"")
    finally:
        store.close()
    with PodStore.open(new_dir / "store.db", readonly=True) as moved:
        assert moved.pods() == {"p1", "p2"}


def test_a_replaced_store_file_is_not_opened_as_the_store(tmp_path: Path) -> None:
    path, other = tmp_path / "store.db", tmp_path / "other.db"
    with PodStore.open(other) as o:
        o.insert("theirs", "c", RES, {0: ["x"]}, b"")
    store = PodStore.open(path)
    try:
        store.insert("mine", "c", RES, {0: ["d"]}, b"")
        shutil.copyfile(other, tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", path)  # a restore put in place under the store

        found = _in_new_thread(store)
        assert isinstance(found, PodStoreError)
        assert "replaced by another file" in str(found)
        # Each new thread is refused again; the store's own connection goes on with its file.
        assert isinstance(_in_new_thread(store), PodStoreError)
        store.insert("mine2", "c", RES, {0: ["d2"]}, b"")
        assert store.pods() == {"mine", "mine2"}
    finally:
        store.close()
    # What the file at the path holds now is SQLite's business (its -wal is still the old
    # store's: replacing a live database is on SQLite's list of ways to corrupt one); what
    # podstore owes is not to open it as this store, which the refusals above show.


def test_a_store_created_by_its_open_is_followed_from_its_first_connection(
    tmp_path: Path,
) -> None:
    """The file did not exist when the store was made: its identity is taken when the first
    connection creates it, so new threads find it, and a later move is still caught."""
    path = tmp_path / "new" / "store.db"
    store = PodStore.open(path)
    try:
        store.insert("p", "c", RES, {0: ["d"]}, b"")
        path.unlink()
        found = _in_new_thread(store)
        assert isinstance(found, PodStoreError)
        assert "deleted or moved away" in str(found)
        assert not path.exists()
    finally:
        store.close()
