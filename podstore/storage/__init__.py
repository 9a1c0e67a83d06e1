"""The node store's data layer: tables, the SQL, and the code that writes and reads rows.

Every module works in a transaction the caller opened (``podstore.sqlite.sessions``); none
opens, commits or rolls back. Internal: the public face is ``podstore.PodStore``.
"""
