"""The former name of ``sqlite/readonly.py``, for an importer not yet moved to it."""

from podstore.sqlite.readonly import PAGE_ROWS, RowStream

__all__ = ["PAGE_ROWS", "RowStream"]
