"""Pure functions over values, with no database, file or clock (internal: the public names are
re-exported by ``podstore/__init__.py``)."""
