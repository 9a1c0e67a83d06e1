"""The fleet: every node's history and current state in one central PostgreSQL database.

Public, like ``podstore.checkpoint`` (docs/fleet.md): ``podstore.fleet.ship.ship`` sends a
store's events (``podstore.fleet.status.ShippingStatus`` follows how it goes),
``podstore.fleet.migrate.init`` creates or upgrades the central schema,
``podstore.fleet.read`` answers the fleet questions and re-checks the hash chains,
``podstore.fleet.admin`` grants per-node and reader roles, renames nodes and retires stores,
and ``podstore.fleet.urls.read_url_file`` reads a URL kept in a file. Needs the ``fleet``
extra (``pip install 'podstore[fleet]'``, psycopg 3); the driver is loaded when the first
connection is made, and ``import podstore`` never loads this package.
"""
