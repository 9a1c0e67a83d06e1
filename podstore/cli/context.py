"""State shared by the commands of one ``podstore`` invocation."""

from __future__ import annotations

from dataclasses import dataclass, field

from podstore.store import PodStore

#: The store when neither --db nor $PODSTORE_DB names one.
DEFAULT_DB = "podstore.db"


@dataclass
class Context:
    """The ``--db`` target and the store, opened lazily by the first command that needs it."""

    db: str
    _stores: dict[bool, PodStore] = field(default_factory=dict)

    def store(self, *, readonly: bool = False) -> PodStore:
        store = self._stores.get(readonly)
        if store is None:
            store = self._stores[readonly] = PodStore.open(self.db, readonly=readonly)
        return store

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
