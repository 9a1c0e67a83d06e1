"""Alembic migrations of the central fleet schema (``podstore fleet init`` runs them).

Their own script location and version table (``fleet_alembic_version``), apart from the node
store's migrations: the two schemas live in different databases and evolve separately.
"""
