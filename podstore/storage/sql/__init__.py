"""Every SQL statement the node store runs over its own tables, one module per topic.

Statements are constant, parameterised strings (``?`` or ``:name``), never built from user
values. ``tests/test_sql_statements.py`` compiles each of them (``EXPLAIN``) against a migrated
store, so the SQL cannot drift from ``storage/schema.py``. The only statements outside this
folder are PRAGMAs and reads of SQLite's catalog in ``podstore/sqlite/``.
"""
