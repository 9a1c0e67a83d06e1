"""Misuse an embedding agent can fall into gets a clear podstore error and changes nothing
(docs/api.md, "Errors"): a bare str given to ``delete``, a reader shared by two threads, an
``sqlite:///`` URL with options, a full disk.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from harness import tinyfs

from podstore import InvalidInputError, PodStore, PodStoreError, StoreFullError

RES = "vendor.com/gpu"


def test_delete_refuses_a_bare_string_and_changes_nothing(store: PodStore) -> None:
    for uid in ("pod", "p", "o", "d"):
        store.insert(uid, "c", RES, None, b"")
    with pytest.raises(InvalidInputError, match="pod_uids: expected an iterable of str"):
        store.delete("pod")  # type: ignore[arg-type]
    assert store.pods() == {"pod", "p", "o", "d"}
    store.delete(["pod"])
    assert store.pods() == {"p", "o", "d"}


_TYPED = """\
import podstore

store = podstore.PodStore.open("node.db")
store.delete(["a"])
store.delete(("a",))
store.delete({"a"})
store.delete(u for u in ["a"])
store.delete({"a": 1}.keys())
store.delete("a")
"""


def _editable_install() -> bool:
    for dist in importlib.metadata.distributions(name="podstore"):
        text = dist.read_text("direct_url.json")
        if text and json.loads(text).get("dir_info", {}).get("editable"):
            return True
    return False


@pytest.mark.skipif(not _editable_install(), reason="podstore is not installed with pip -e here")
def test_a_type_checker_refuses_a_bare_string_for_delete(tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(_TYPED)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert errors[0].startswith("user.py:9:") and "delete" in errors[0], errors


def test_a_reader_used_by_two_threads_at_once_raises_a_podstore_error(store: PodStore) -> None:
    """Thread A is inside a statement of the reader (held there by a function that waits);
    thread B's use of the same reader raises PodStoreError at once — not a raw TypeError,
    and without waiting for A — and A's statement completes."""
    store.insert("p", "c", RES, None, b"")
    reader = store.reader()
    inside, release = threading.Event(), threading.Event()

    def hold(x: object) -> object:
        inside.set()
        release.wait(30)
        return x

    conn = reader._guarded.conn
    assert conn is not None
    conn.create_function("hold", 1, hold)
    got: list[object] = []
    a = threading.Thread(target=lambda: got.extend(reader.stream("SELECT hold(uid) FROM pods")))
    a.start()
    seen: list[BaseException] = []

    def other() -> None:
        try:
            list(reader.pods())
        except BaseException as exc:
            seen.append(exc)

    try:
        assert inside.wait(30)
        b = threading.Thread(target=other)
        b.start()
        b.join(10)  # on success B raises at once; without the check it waits for A
        stuck = b.is_alive()
    finally:
        release.set()
        a.join(30)
    b.join(30)
    assert not stuck, "the second thread waited for the first one's statement"
    assert len(seen) == 1 and type(seen[0]) is PodStoreError, seen
    assert "another thread" in str(seen[0])
    assert got == [("p",)]
    assert [p.pod_uid for p in reader.pods()] == ["p"]  # usable again, by either thread
    reader.close()


@pytest.mark.parametrize("query", ["?mode=ro", "?x", "?cache=shared&uri=true"])
def test_an_sqlite_url_with_options_is_refused_and_creates_nothing(
    tmp_path: Path, query: str
) -> None:
    url = f"sqlite:///{tmp_path}/s.db{query}"
    with pytest.raises(InvalidInputError, match="takes no URL options"):
        PodStore.open(url)
    assert list(tmp_path.iterdir()) == []
    with PodStore.open(f"sqlite:///{tmp_path}/s.db") as store:  # the plain URL still works
        store.insert("p", "c", RES, None, b"")
    assert (tmp_path / "s.db").is_file()


def _big(i: int) -> dict[int, list[str] | None]:
    return {0: [f"big-{i}-{k:04d}-" + "x" * 40 for k in range(120)]}


def _fill_until_full(store: PodStore) -> StoreFullError:
    for i in range(10_000):
        try:
            store.insert(f"fill-{i}", "c", RES, _big(i), b"")
        except StoreFullError as exc:
            return exc
    raise AssertionError("the store never filled up")


def _says_what_to_do(exc: StoreFullError) -> None:
    text = str(exc)
    assert "full" in text and "free space" in text and "unchanged" in text, text


def test_a_store_at_its_size_limit_says_what_happened_and_what_to_do(db_path: Path) -> None:
    """SQLite's max_page_count stands in for a full disk (the same SQLITE_FULL)."""
    store = PodStore.open(db_path, verify="off")
    store.insert("first", "c", RES, None, b"")
    conn = store._sessions.conn()
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages + 8}")
    exc = _fill_until_full(store)
    _says_what_to_do(exc)
    before = store.pods()
    with pytest.raises(StoreFullError), store.transaction():
        store.insert("in-block", "c", RES, None, b"")
        store.insert("too-big", "c", RES, _big(99_999), b"")
    assert store.pods() == before
    conn.execute("PRAGMA max_page_count = 1073741823")  # room again: no reopen needed
    store.insert("after", "c", RES, _big(1), b"")
    assert store.pods() == before | {"after"}
    store.close()


@pytest.mark.slow
def test_a_full_disk_says_what_happened_and_what_to_do(tmp_path: Path) -> None:
    with tinyfs.tiny_fs(tmp_path / "tinyfs") as mnt:
        store = PodStore.open(mnt / "store.db", verify="off")
        store.insert("first", "c", RES, None, b"")
        tinyfs.fill(mnt / "ballast")
        exc = _fill_until_full(store)
        _says_what_to_do(exc)
        before = store.pods()
        (mnt / "ballast").unlink()
        store.insert("after", "c", RES, _big(1), b"")
        assert store.pods() == before | {"after"}
        store.close()


def test_a_block_that_carries_on_after_sqlite_ended_its_transaction_commits_nothing(
    db_path: Path,
) -> None:
    """A full disk makes SQLite roll the whole transaction back, not just the failed call:
    a block that catches the error and carries on gets PodStoreError for every later call
    and at its end, and nothing of it is written (its later calls do not commit one by
    one)."""
    store = PodStore.open(db_path, verify="off")
    store.insert("first", "c", RES, None, b"")
    conn = store._sessions.conn()
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages + 8}")
    outcomes: list[str] = []
    with pytest.raises(PodStoreError, match="rolled back"), store.transaction():
        store.insert("early", "c", RES, None, b"")
        try:
            for i in range(10_000):
                store.insert(f"fill-{i}", "c", RES, _big(i), b"")
        except StoreFullError as exc:
            _says_what_to_do(exc)
            outcomes.append("full")
        conn.execute("PRAGMA max_page_count = 1073741823")
        try:
            store.insert("late", "c", RES, None, b"")
        except PodStoreError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == "full" and "rolled back" in outcomes[1], outcomes
    assert store.pods() == {"first"}
    store.insert("after", "c", RES, None, b"")
    assert store.pods() == {"first", "after"}
    store.close()
