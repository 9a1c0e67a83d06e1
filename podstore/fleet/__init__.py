"""The fleet: every node's history and current state in one central PostgreSQL database.

Public, like ``podstore.checkpoint`` (docs/fleet.md): ``podstore.fleet.ship.ship`` sends a
store's events, ``podstore.fleet.migrate.init`` creates or upgrades the central schema, and
``podstore.fleet.read`` answers the fleet questions. Needs the ``fleet`` extra (``pip install
'podstore[fleet]'``, psycopg 3); the driver is loaded when the first connection is made, and
``import podstore`` never loads this package.
"""
