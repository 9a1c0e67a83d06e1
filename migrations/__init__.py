"""Alembic migrations, shipped inside the wheel as ``podstore.migrations``."""
