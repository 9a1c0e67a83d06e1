"""The exception tree. Every error podstore raises derives from PodStoreError.

A call that raises any of these has changed nothing in the store.
"""

from __future__ import annotations

from typing import Any


def _rebuild(
    cls: type[BaseException], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> BaseException:
    """Unpickle an error whose constructor takes keyword-only arguments (``__reduce__``)."""
    return cls(*args, **kwargs)


class PodStoreError(Exception):
    """Base class of every error podstore raises on purpose."""


class InvalidInputError(PodStoreError, ValueError):
    """An argument has the wrong type or an impossible value; nothing was written."""


class CheckpointError(PodStoreError):
    """A kubelet checkpoint file could not be used."""


class CheckpointFormatError(CheckpointError):
    """The checkpoint is not a v1 or v2 kubelet checkpoint (bad JSON, wrong types, bad field)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist (kubelet starts empty in that case, without error)."""


class CheckpointCorruptError(CheckpointError):
    """The checkpoint parsed but its stored checksum does not match its contents.

    Named as kubelet's ``CorruptCheckpointError``: ``expected`` is the checksum stored in the
    file, ``actual`` the one computed from the decoded data.
    """

    def __init__(self, expected: int, actual: int, message: str | None = None) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            message or f"checkpoint is corrupted: stored checksum {expected}, computed {actual}"
        )

    # Errors with constructor arguments of their own pickle by them (the default would call
    # the class with the message alone): AsyncPodStore's worker process sends them back.
    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expected, self.actual, str(self)), self.__dict__)


class ImportRefusedError(CheckpointError):
    """A replacing import was refused: every entry of the file was skipped (its AllocResp does
    not decode), so it would have dropped the store's entries and put nothing in their place.

    Raised only when asked for (``import_checkpoint(allow_all_skipped=False)``, the command
    line's default); ``skipped`` is the number of skipped entries, ``existing`` the number of
    entries the store holds (and still holds).
    """

    def __init__(self, message: str, *, skipped: int, existing: int) -> None:
        self.skipped = skipped
        self.existing = existing
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {"skipped": self.skipped, "existing": self.existing}
        return (_rebuild, (type(self), (str(self),), kwargs), self.__dict__)


class SchemaError(PodStoreError):
    """The database schema is too old (and upgrading was refused), too new, or not podstore's."""


class StoreCorruptError(PodStoreError):
    """The SQLite file is damaged or is not a database."""


class StoreFullError(PodStoreError):
    """The disk (or the database's size limit) is full; the write was rolled back."""


class StoreBusyError(PodStoreError):
    """Another connection held the write lock past the busy timeout."""


class ReadOnlyStoreError(PodStoreError):
    """A write was attempted on a store opened read-only, or on a read-only file."""


class FleetError(PodStoreError):
    """The fleet database (the central PostgreSQL, docs/fleet.md) refused or failed an
    operation: its schema is missing or too new, or a statement failed there."""


class FleetUnavailableError(FleetError):
    """The fleet database cannot be reached (server down, refused, or the connection broke);
    nothing was changed on the node, and whatever the call had not committed there is undone."""


class FleetRefusedError(FleetError):
    """The fleet database refused a ship or a statement, and wrote nothing but the refusal's
    count: the store belongs to another node, its history diverged from the fleet's copy (a
    clone, an edited or replaced history), it was retired, or the role lacks the right.

    ``reason`` says which: ``"another node"``, ``"diverged"``, ``"retired"`` or
    ``"permission"``.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, str(self)), self.__dict__)


class QueryLimitError(PodStoreError):
    """A read-only query ran past its time limit, returned more rows than its row limit, or
    built a value larger than a read-only query may; it was stopped (nothing was changed).

    ``limit`` says which: ``"timeout"``, ``"max_rows"`` or ``"value_size"``.
    """

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.limit, str(self)), self.__dict__)
