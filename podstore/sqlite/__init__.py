"""SQLite mechanics (connections, sessions, errors, files, read-only SQL, migrations);
nothing here knows the store's tables (``podstore.storage.sql``)."""
