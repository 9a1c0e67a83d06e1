"""The node store's data layer: tables, the SQL, and the code that writes and reads rows.

Every module works on a sqlite3 connection that the caller has already put in the right
transaction (``podstore.sqlite.sessions``); none of them opens, commits or rolls back. The SQL
itself lives in ``storage/sql/``. Internal: the public face is ``podstore.PodStore``.
"""
