"""SQLite mechanics, independent of what the store keeps: connections and pragmas, error
translation, file creation and modes, per-thread sessions and transactions, the guarded
read-only connection, and migrate-on-open.

Internal: nothing here knows the node store's tables (their SQL is in ``podstore.storage.sql``).
"""
