"""The exception tree: every error podstore raises derives from PodStoreError, and a call
that raises one has changed nothing in the store."""

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
    """The checkpoint's stored checksum (``expected``) does not match the one computed
    (``actual``): kubelet's ``CorruptCheckpointError``."""

    def __init__(self, expected: int, actual: int, message: str | None = None) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            message or f"checkpoint is corrupted: stored checksum {expected}, computed {actual}"
        )

    # Pickled by their constructor's arguments: AsyncPodStore's worker process sends them back.
    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expected, self.actual, str(self)), self.__dict__)


class ImportRefusedError(CheckpointError):
    """A replacing import whose every entry was skipped would have emptied the store
    (``allow_all_skipped=False``, the command line's default); ``skipped`` and ``existing``
    count the file's skipped entries and the store's (kept) ones."""

    def __init__(self, message: str, *, skipped: int, existing: int) -> None:
        self.skipped = skipped
        self.existing = existing
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {"skipped": self.skipped, "existing": self.existing}
        return (_rebuild, (type(self), (str(self),), kwargs), self.__dict__)


class ExportRefusedError(CheckpointError):
    """An export in an older format would lose what the store holds and that format cannot
    (``drops``, one line each); nothing was written. ``allow_loss=True`` writes it anyway."""

    def __init__(self, message: str, *, drops: tuple[str, ...]) -> None:
        self.drops = drops
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (str(self),), {"drops": self.drops}), self.__dict__)


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
    """The fleet database (docs/fleet.md) refused or failed an operation."""


class FleetUnavailableError(FleetError):
    """The fleet database cannot be reached; nothing changed on the node, and what the call
    had not committed there is undone."""


class FleetRefusedError(FleetError):
    """The fleet database refused a ship or statement (writing only the refusal's count);
    ``reason``: ``"another node"``, ``"diverged"`` (a clone, an edited history),
    ``"retired"`` or ``"permission"``."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, str(self)), self.__dict__)


class QueryLimitError(PodStoreError):
    """A read-only query was stopped at a limit: ``limit`` is ``"timeout"``, ``"max_rows"``
    or ``"value_size"``."""

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.limit, str(self)), self.__dict__)
