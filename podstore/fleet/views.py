"""The central views: the fleet's stable SQL contract (docs/fleet.md).

Each mirrors a node view (docs/sql.md) with ``node`` and ``store_id`` in front, and applies
its rule within one store: ``v_fleet_double_allocations`` is ``v_double_allocations`` store
by store (the same device ID on two nodes is two devices). The joins are on ``store_id``, so
they stay on one shard when the tables are distributed by it. They show the current state, so
a retired store (``podstore fleet retire``) is left out; its history stays in the tables.

Revision f0002 keeps a frozen copy of this text; a change here needs a new revision, and a
test checks that a database at head holds exactly these definitions.
"""

from __future__ import annotations

V_FLEET_ALLOCATIONS = """
CREATE VIEW v_fleet_allocations AS
SELECT s.node AS node, a.store_id AS store_id, a.pod_uid AS pod_uid,
       a.container AS container, a.resource AS resource, a.numa_node AS numa_node,
       a.device_id AS device_id
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
WHERE s.retired_at IS NULL
"""

V_FLEET_DEVICE_OWNERS = """
CREATE VIEW v_fleet_device_owners AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
WHERE s.retired_at IS NULL
"""

# As on the node: containers of one pod may share a device, so only a device held from more
# than one pod of the same store is a double allocation. Which devices those are is kept by
# shipping in fleet_double_allocated (a handful of rows), so this view never groups the
# fleet's allocations.
V_FLEET_DOUBLE_ALLOCATIONS = """
CREATE VIEW v_fleet_double_allocations AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       d.pod_count AS pod_count
FROM fleet_double_allocated d
JOIN fleet_allocations a
  ON a.store_id = d.store_id AND a.resource = d.resource AND a.device_id = d.device_id
JOIN fleet_stores s ON s.store_id = d.store_id
WHERE s.retired_at IS NULL
"""

#: (name, CREATE statement) in creation order; drop in reverse.
VIEWS: tuple[tuple[str, str], ...] = (
    ("v_fleet_allocations", V_FLEET_ALLOCATIONS),
    ("v_fleet_device_owners", V_FLEET_DEVICE_OWNERS),
    ("v_fleet_double_allocations", V_FLEET_DOUBLE_ALLOCATIONS),
)
