"""Every SQL statement the node store runs over its own tables, one module per topic.

Statements are constant, parameterised strings, never built from user values;
``tests/test_sql_statements.py`` compiles each against a migrated store. Outside this folder:
only PRAGMAs and catalog reads in ``podstore/sqlite/``.
"""
