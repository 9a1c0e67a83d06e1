"""The fleet: every node's history and current state in one central PostgreSQL database.

Public, like ``podstore.checkpoint`` (docs/fleet.md): :func:`ship` sends a store's events,
:func:`init` creates or upgrades the central schema, and ``podstore.fleet.read`` answers the
fleet questions. Needs the ``fleet`` extra (``pip install 'podstore[fleet]'``, psycopg 3);
the driver is loaded when the first connection is made, and ``import podstore`` never loads
this package.
"""

from podstore.fleet.migrate import InitReport, init
from podstore.fleet.ship import ShipReport, ship

__all__ = ["InitReport", "ShipReport", "init", "ship"]
