"""State shared by the commands of one ``podstore`` invocation: the store and how to open it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from podstore.errors import ReadOnlyStoreError
from podstore.sqlite.busy import DEFAULT_BUSY_TIMEOUT

if TYPE_CHECKING:
    from podstore.sqlite.connection import ConnectOptions
    from podstore.store import PodStore

#: The store when neither --db nor $PODSTORE_DB names one.
DEFAULT_DB = "podstore.db"


@dataclass
class Context:
    """The global options (``--db``, ``--readonly``, ``--busy-timeout``, given before or after
    the command) and the store, opened lazily by the first command that needs it."""

    db: str
    readonly: bool = False
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    _stores: dict[bool, PodStore] = field(default_factory=dict)

    def store(self, *, readonly: bool = False) -> PodStore:
        """The store, opened on first use: read-only (never created or migrated) for commands
        that only read, without the open-time check (a damaged page still fails the read that
        meets it; ``podstore verify`` is the check); else for writing, which ``--readonly``
        refuses (ReadOnlyStoreError) before anything is opened."""
        if not readonly:
            self.require_writable()
        store = self._stores.get(readonly)
        if store is None:
            from podstore.store import PodStore  # not for --help or --version

            store = self._stores[readonly] = PodStore.open(
                self.db,
                readonly=readonly,
                busy_timeout=self.busy_timeout,
                verify="off" if readonly else "blocking",
            )
        return store

    def options(self, *, readonly: bool) -> ConnectOptions:
        if not readonly:
            self.require_writable()
        from podstore.sqlite.connection import ConnectOptions, database_path

        return ConnectOptions(
            path=database_path(self.db), readonly=readonly, busy_timeout=self.busy_timeout
        )

    def require_writable(self) -> None:
        """Raise ReadOnlyStoreError when ``--readonly`` was given (the command writes)."""
        if self.readonly:
            raise ReadOnlyStoreError("--readonly was given, and this command writes the store")

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
