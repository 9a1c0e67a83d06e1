"""Record every SQL statement podstore sends to SQLite, with its bound parameters.

``recording()`` swaps ``sqlite3.connect`` for a version that returns a connection subclass
whose cursors log ``(connection id, SQL text, parameters)`` before executing. The text is the
statement exactly as podstore passed it to the driver — not SQLite's expanded form (the
trace callback expands bound values into the text, which would hide the difference between
binding and formatting). ``commit()``/``rollback()`` calls (SQLAlchemy and Alembic use them)
are logged as COMMIT/ROLLBACK statements, as the driver issues them.

The log is what the power-loss harness replays through apsw, and what the security test
searches for marker values.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_real_connect = sqlite3.connect


@dataclass
class Event:
    """One thing a podstore connection did: open, exec, many, close — or a workload ack."""

    kind: str
    conn: int = -1
    sql: str = ""
    params: Any = None
    path: str = ""
    ack: int = -1


@dataclass
class Recording:
    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    paused: bool = False
    _next_id: int = 0

    def add(self, event: Event) -> None:
        if self.paused:
            return
        with self.lock:
            self.events.append(event)

    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def done(self, event: Event) -> None:
        """Called after the driver returned from ``event`` (a statement, COMMIT or ROLLBACK);
        the recording itself has nothing to do then (tests/harness/txwatch.py has)."""

    def ack(self, index: int) -> None:
        """Mark that workload operation ``index`` returned (acknowledged to its caller)."""
        self.add(Event("ack", ack=index))

    @contextmanager
    def pause(self) -> Iterator[None]:
        """Leave statements out (e.g. the harness's own checking reads)."""
        old, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = old

    def statements(self) -> list[str]:
        return [e.sql for e in self.events if e.kind in ("exec", "many")]


def _freeze(params: Any) -> Any:
    if params is None:
        return ()
    if isinstance(params, dict):
        return dict(params)
    return tuple(params)


def _factory(rec: Recording) -> type[sqlite3.Connection]:
    class RecordingCursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
            conn = self.connection
            assert isinstance(conn, RecordingConnection)
            event = Event("exec", conn.rec_id, sql, _freeze(parameters))
            rec.add(event)
            cur = super().execute(sql, parameters)
            rec.done(event)
            return cur

        def executemany(  # type: ignore[override]
            self, sql: str, seq_of_parameters: Iterable[Any], /
        ) -> sqlite3.Cursor:
            conn = self.connection
            assert isinstance(conn, RecordingConnection)
            rows = [_freeze(p) for p in seq_of_parameters]
            event = Event("many", conn.rec_id, sql, rows)
            rec.add(event)
            cur = super().executemany(sql, rows)
            rec.done(event)
            return cur

    class RecordingConnection(sqlite3.Connection):
        rec_id: int

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.rec_id = rec.new_id()
            rec.add(Event("open", self.rec_id, path=str(args[0] if args else kwargs["database"])))

        def cursor(self, factory: Any = RecordingCursor) -> Any:
            return super().cursor(factory)

        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            cur: sqlite3.Cursor = self.cursor().execute(sql, parameters)
            return cur

        def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
            cur: sqlite3.Cursor = self.cursor().executemany(sql, parameters)
            return cur

        def executescript(self, script: str, /) -> sqlite3.Cursor:
            event = Event("exec", self.rec_id, script, ())
            rec.add(event)
            cur = super().executescript(script)
            rec.done(event)
            return cur

        def commit(self) -> None:
            self._end("COMMIT", super().commit)

        def rollback(self) -> None:
            self._end("ROLLBACK", super().rollback)

        def _end(self, sql: str, call: Callable[[], None]) -> None:
            if not self.in_transaction:
                call()
                return
            event = Event("exec", self.rec_id, sql, ())
            rec.add(event)
            call()
            rec.done(event)

        def close(self) -> None:
            rec.add(Event("close", self.rec_id))
            super().close()

    return RecordingConnection


@contextmanager
def recording(rec: Recording | None = None) -> Iterator[Recording]:
    """Record every connection opened through ``sqlite3.connect`` inside the block (into
    ``rec``, a Recording or a subclass, when given)."""
    rec = Recording() if rec is None else rec
    factory = _factory(rec)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", factory)
        conn: sqlite3.Connection = _real_connect(*args, **kwargs)
        return conn

    sqlite3.connect = connect  # type: ignore[assignment]
    try:
        yield rec
    finally:
        sqlite3.connect = _real_connect


def sql_texts(events: Sequence[Event]) -> list[str]:
    return [e.sql for e in events if e.kind in ("exec", "many")]
