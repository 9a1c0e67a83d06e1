"""The streaming read API: ``PodStore.reader()``, ``PodStore.stream()``, ``RowStream``, the
limits (``timeout``, ``max_rows``) and ``QueryLimitError``; and the constructor guard."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from podstore import (
    InvalidInputError,
    PodStore,
    PodStoreError,
    QueryLimitError,
    Reader,
    ReadOnlyStoreError,
    RowStream,
)
from podstore.sqlite import readonly

RUNAWAY = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def fill(store: PodStore, pods: int) -> None:
    with store.transaction():
        for i in range(pods):
            store.insert(f"p{i:04d}", "c", "r", {0: [f"d{i}"]}, b"")


def test_the_constructor_is_refused(db_path: Path) -> None:
    with pytest.raises(PodStoreError, match=r"PodStore\.open"):
        PodStore(db_path)  # type: ignore[arg-type]
    with PodStore.open(db_path) as store, pytest.raises(PodStoreError, match="open"):
        PodStore(store._sessions)
    assert not (db_path.parent / "x.db").exists()


def test_stream_gives_the_rows_of_query_page_by_page(store: PodStore) -> None:
    fill(store, 3 * readonly.PAGE_ROWS + 5)
    sql = "SELECT uid, id FROM pods ORDER BY uid"
    with store.stream(sql) as rows:
        assert isinstance(rows, RowStream)
        assert rows.columns == ("uid", "id")
        first = next(rows)
        rest = list(rows)
    assert [first, *rest] == store.query(sql).rows
    assert list(rows) == []  # exhausted, and closed


def test_a_reader_is_one_snapshot(store: PodStore) -> None:
    fill(store, 2 * readonly.PAGE_ROWS)
    with store.reader() as reader:
        assert isinstance(reader, Reader)
        pods = reader.stream("SELECT uid FROM pods ORDER BY uid")
        head = next(pods)
        # A write commits while the reader is half-way: it sees none of it, in any statement.
        store.insert("zzz-late", "c", "r", {0: ["late"]}, b"")
        store.delete(["p0001"])
        seen = [head[0], *(r[0] for r in pods)]
        count = next(reader.stream("SELECT count(*) FROM pods"))[0]
    assert "zzz-late" not in seen and "p0001" in seen
    assert count == len(seen) == 2 * readonly.PAGE_ROWS
    assert store.query("SELECT count(*) FROM pods").rows == [(2 * readonly.PAGE_ROWS,)]


def test_reader_history_is_store_history_streamed(store: PodStore) -> None:
    fill(store, 40)
    store.delete(["p0003"])
    store.set_registered_devices({"r": ["d1", "d2"]})
    with store.reader() as reader:
        assert list(reader.history()) == store.history()
        assert list(reader.history(pod_uid="p0003")) == store.history(pod_uid="p0003")
        assert list(reader.history(device_id="d2")) == store.history(device_id="d2")
        with pytest.raises(InvalidInputError, match="since"):
            reader.history(since="not a time")


def test_max_rows_allows_exactly_that_many(store: PodStore) -> None:
    fill(store, 10)
    assert len(store.query("SELECT * FROM pods", max_rows=10).rows) == 10
    with pytest.raises(QueryLimitError, match="more than 9 rows") as exc:
        store.query("SELECT * FROM pods", max_rows=9)
    assert exc.value.limit == "max_rows"
    got = []
    with pytest.raises(QueryLimitError), store.stream("SELECT uid FROM pods", max_rows=4) as rows:
        got.extend(rows)
    assert len(got) == 4  # the rows before the limit were delivered
    assert store.query("SELECT 1 WHERE 0", max_rows=0).rows == []


def test_timeout_stops_a_runaway_statement(store: PodStore) -> None:
    start = time.monotonic()
    with pytest.raises(QueryLimitError, match=r"stopped after 0\.3 s") as exc:
        store.query(RUNAWAY, timeout=0.3)
    assert exc.value.limit == "timeout"
    assert time.monotonic() - start < 5
    # The store and later queries are unaffected.
    assert store.query("SELECT 1", timeout=0.3).rows == [(1,)]


def test_timeout_counts_sqlite_work_not_the_callers_pauses(store: PodStore) -> None:
    fill(store, 2 * readonly.PAGE_ROWS)
    with store.stream("SELECT uid FROM pods", timeout=0.2) as rows:
        got = []
        for row in rows:
            if len(got) == readonly.PAGE_ROWS - 1:
                time.sleep(0.3)  # a slow reader of the output, longer than the limit
            got.append(row)
    assert len(got) == 2 * readonly.PAGE_ROWS


def test_the_reader_is_read_only(store: PodStore) -> None:
    with store.reader() as reader:
        with pytest.raises(ReadOnlyStoreError):
            reader.stream("DELETE FROM pods")
        with pytest.raises(InvalidInputError, match="syntax"):
            reader.stream("SELEKT 1")
        with pytest.raises(InvalidInputError):
            reader.stream(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"timeout": -1}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": "5"}, "timeout"),
        ({"max_rows": -1}, "max_rows"),
        ({"max_rows": 1.5}, "max_rows"),
        ({"max_rows": False}, "max_rows"),
    ],
)
def test_bad_limits_are_refused(store: PodStore, kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(InvalidInputError, match=argument):
        store.reader(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=argument):
        store.query("SELECT 1", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=argument):
        store.stream("SELECT 1", **kwargs)  # type: ignore[arg-type]


def test_closed_store_and_closed_reader(db_path: Path) -> None:
    store = PodStore.open(db_path)
    reader = store.reader()
    rows = reader.stream("SELECT 1")
    reader.close()
    with pytest.raises(PodStoreError):
        reader.stream("SELECT 1")
    with pytest.raises(PodStoreError):
        list(rows)
    store.close()
    for call in (store.reader, lambda: store.stream("SELECT 1")):
        with pytest.raises(PodStoreError, match="closed"):
            call()


def test_a_stream_closes_its_own_connection(store: PodStore) -> None:
    rows = store.stream("SELECT 1")
    assert list(rows) == [(1,)]
    assert rows._guarded.conn is None
    rows = store.stream("SELECT 1")
    rows.close()
    assert rows._guarded.conn is None


# ---- typed streams: what the operator commands show, without SQL in the caller ------------------


def test_pods_devices_owners_and_containers_as_typed_streams(store: PodStore) -> None:
    from podstore import DeviceHolding, DeviceOwner, PodSummary

    store.insert("p1", "c2", "r,1", {0: ["a", "b"], 1: ["b"]}, b"")  # a comma in a name
    store.insert("p1", "c1", "r2", {-1: ["x"]}, None)
    store.insert("p1", "c1", "r,1", None, b"")  # no devices
    store.insert("p2", "c", "r2", {0: ["x"]}, b"")  # x held twice
    store.set_registered_devices({"r,1": ["a", "b", "free"], "r2": [], "zz": ["z"]})
    with store.reader() as reader:
        assert list(reader.pods()) == [
            PodSummary("p1", 2, 3, 3, ("r,1", "r2")),
            PodSummary("p2", 1, 1, 1, ("r2",)),
        ]
        assert list(reader.devices()) == [
            DeviceHolding("r,1", "a", (0,), True, "p1", "c2"),
            DeviceHolding("r,1", "b", (0, 1), True, "p1", "c2"),
            DeviceHolding("r,1", "free", (), True, None, None),
            DeviceHolding("r2", "x", (-1,), False, "p1", "c1"),
            DeviceHolding("r2", "x", (0,), False, "p2", "c"),
            DeviceHolding("zz", "z", (), True, None, None),
        ]
        assert [d.device_id for d in reader.devices("zz")] == ["z"]
        assert list(reader.devices("nothing")) == []
        assert list(reader.owners("x")) == [
            DeviceOwner("p1", "c1", "r2"),
            DeviceOwner("p2", "c", "r2"),
        ]
        assert list(reader.owners("nobody")) == []
        assert list(reader.containers("p1")) == ["c1", "c2"]
        assert list(reader.containers("unknown")) == []


@pytest.mark.parametrize("call", ["devices", "owners", "containers"])
def test_typed_streams_refuse_bad_arguments(store: PodStore, call: str) -> None:
    with store.reader() as reader, pytest.raises(InvalidInputError):
        getattr(reader, call)(7)
