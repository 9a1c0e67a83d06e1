"""The fleet: every node's history and current state in one central PostgreSQL database.

Public, by module (docs/api.md, "The fleet database"); needs the ``fleet`` extra (psycopg 3),
loaded at the first connection. ``import podstore`` never loads this package.
"""
