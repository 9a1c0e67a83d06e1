"""The alignment views computed store by store: a query for one node no longer groups the
whole fleet's allocations and items first.

Revision ID: f0004
Revises: f0003
Create Date: 2026-12-05

f0003's ``v_fleet_container_numa`` grouped every store's allocations, CPU and memory items
and then joined ``fleet_stores``: PostgreSQL cannot push ``node = …`` into those groups, so
one node's rows took 6.5 s on a fleet of 10,000 stores and 10,000,000 events
(scripts/fleet_node_views_scale.py). The same rule now runs in a LATERAL subquery per store,
which reads one store's rows through the ``store_id`` indexes. Same columns, same rows (a test
compares both definitions on one fleet). ``v_fleet_numa_misaligned`` depends on it, so both
are re-created; the reader roles ``fleet grant-reader`` made are granted them again.
Views are frozen text here (f0003's for the downgrade).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from podstore.fleet.migrations.versions import f0003_node_state as f0003

revision: str = "f0004"
down_revision: str | None = "f0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CONTAINER_NUMA = """
CREATE VIEW v_fleet_container_numa AS
SELECT s.node AS node, s.store_id AS store_id, x.pod_uid AS pod_uid,
       n.value ->> 'namespace' AS namespace, n.value ->> 'name' AS pod_name,
       x.container AS container, x.device_numa AS device_numa, x.cpu_numa AS cpu_numa,
       x.memory_numa AS memory_numa,
       CASE
           WHEN CAST(x.device_numa IS NOT NULL AS integer)
                + CAST(x.cpu_numa IS NOT NULL AS integer)
                + CAST(x.memory_numa IS NOT NULL AS integer) < 2 THEN NULL
           WHEN coalesce(x.device_numa, x.cpu_numa, x.memory_numa)
                    = coalesce(x.cpu_numa, x.memory_numa, x.device_numa)
                AND coalesce(x.memory_numa, x.device_numa, x.cpu_numa)
                    = coalesce(x.device_numa, x.cpu_numa, x.memory_numa) THEN 1
           ELSE 0
       END AS aligned
FROM fleet_stores s
CROSS JOIN LATERAL (
    WITH
    topo (cpu, numa_node) AS (
        SELECT CAST(c.cpu AS bigint), CAST(substr(t.resource, 6) AS bigint)
        FROM fleet_node_items t
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(t.value) = 'array' THEN t.value END) AS c (cpu)
        WHERE t.store_id = s.store_id AND t.kind = 'node' AND t.resource LIKE 'numa:%'
    ),
    dev (pod_uid, container, nodes) AS (
        SELECT a.pod_uid, a.container, jsonb_agg(DISTINCT a.numa_node ORDER BY a.numa_node)
        FROM fleet_allocations a
        WHERE a.store_id = s.store_id AND a.numa_node >= 0
        GROUP BY a.pod_uid, a.container
    ),
    cpu (pod_uid, container, nodes) AS (
        SELECT i.pod_uid, i.container, jsonb_agg(DISTINCT t.numa_node ORDER BY t.numa_node)
        FROM fleet_node_items i
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS c (cpu)
        JOIN topo t ON t.cpu = CAST(c.cpu AS bigint)
        WHERE i.store_id = s.store_id AND i.kind = 'cpu' AND i.resource = 'cpu'
          AND i.pod_uid IS NOT NULL AND i.container IS NOT NULL
        GROUP BY i.pod_uid, i.container
    ),
    mem (pod_uid, container, nodes) AS (
        SELECT i.pod_uid, i.container,
               jsonb_agg(DISTINCT CAST(n.numa_node AS bigint) ORDER BY CAST(n.numa_node AS bigint))
        FROM fleet_node_items i
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS b
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(b.value -> 'numaAffinity') = 'array'
                 THEN b.value -> 'numaAffinity' END) AS n (numa_node)
        WHERE i.store_id = s.store_id AND i.kind = 'memory' AND i.resource = 'memory'
          AND i.container IS NOT NULL
        GROUP BY i.pod_uid, i.container
    ),
    keys (pod_uid, container) AS (
        SELECT pod_uid, container FROM fleet_allocations WHERE store_id = s.store_id
        UNION
        SELECT pod_uid, container FROM fleet_node_items
        WHERE store_id = s.store_id AND kind = 'cpu' AND resource = 'cpu'
          AND pod_uid IS NOT NULL AND container IS NOT NULL
        UNION
        SELECT pod_uid, container FROM fleet_node_items
        WHERE store_id = s.store_id AND kind = 'memory' AND resource = 'memory'
          AND container IS NOT NULL
    )
    SELECT k.pod_uid, k.container, d.nodes AS device_numa, c.nodes AS cpu_numa,
           m.nodes AS memory_numa
    FROM keys k
    LEFT JOIN dev d ON d.pod_uid = k.pod_uid AND d.container = k.container
    LEFT JOIN cpu c ON c.pod_uid = k.pod_uid AND c.container = k.container
    LEFT JOIN mem m ON m.pod_uid = k.pod_uid AND m.container = k.container
) x
LEFT JOIN fleet_node_items n
  ON n.store_id = s.store_id
 AND n.item_key = CAST(jsonb_build_array(x.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
"""

_F0003 = dict(f0003._VIEWS)
_NAMES = ("v_fleet_container_numa", "v_fleet_numa_misaligned")


def _swap(container_numa: str) -> None:
    readers = f0003._readers("v_fleet_container_numa")
    op.execute("DROP VIEW v_fleet_numa_misaligned")
    op.execute("DROP VIEW v_fleet_container_numa")
    op.execute(container_numa)
    op.execute(_F0003["v_fleet_numa_misaligned"])
    for role in readers:
        op.execute(f"GRANT SELECT ON {', '.join(_NAMES)} TO {f0003._ident(role)}")


def upgrade() -> None:
    _swap(_CONTAINER_NUMA)


def downgrade() -> None:
    _swap(_F0003["v_fleet_container_numa"])
