"""The busy timeout's default and bound, apart so the command line's ``--help`` loads no
connection code."""

DEFAULT_BUSY_TIMEOUT = 10.0
# SQLite takes the busy timeout as an int of milliseconds.
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000
