"""How long a writer waits for another writer's lock: the default and the bound.

Apart from ``connection.py`` so that the command line can declare ``--busy-timeout`` without
loading the connection code (``podstore --version`` and ``--help`` never connect).
"""

DEFAULT_BUSY_TIMEOUT = 10.0
# SQLite takes the busy timeout as an int of milliseconds.
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000
