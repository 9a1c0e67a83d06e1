"""The history's end evidence ships: ``fleet_events.op`` takes ``end``; the intervals view.

Revision ID: f0007
Revises: f0006
Create Date: 2026-12-06

A node's ``end`` event (storage/ends.py) names no device and changes no entry or item: the
shipping functions store it like any event (its ``devices`` empty) and the chain check covers
it as it covers the rest. The op CHECK widens, and ``v_fleet_allocation_intervals`` (a frozen
copy of ``views.py`` as of this revision) is created; the reader roles ``fleet grant-reader``
made read it too. The downgrade drops the view, removes the shipped ``end`` events (the chain
check then reports the gaps they leave, as it would for any event a fleet lost) and narrows
the CHECK again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from podstore.fleet.migrations.versions import f0003_node_state as f0003

revision: str = "f0007"
down_revision: str | None = "f0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = (
    "'insert', 'replace', 'delete', 'import', 'backfill', 'registered', 'unregistered', "
    "'cpu-set', 'cpu-delete', 'memory-set', 'memory-delete', 'dra-set', 'dra-delete', "
    "'node-set', 'node-delete'"
)


V_FLEET_ALLOCATION_INTERVALS = """
CREATE VIEW v_fleet_allocation_intervals AS
WITH dp_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.pod_uid, e.container, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.pod_uid IS NOT NULL
      AND e.op IN ('insert', 'replace', 'import', 'backfill', 'delete')
    WINDOW w AS (PARTITION BY e.store_id, e.pod_uid, e.container, e.resource ORDER BY e.seq)
),
dp_held AS (
    SELECT DISTINCT e.store_id, e.pod_uid, e.container, e.resource, d.device,
           e.rn, e.seq, e.ts, e.next_ts
    FROM dp_events e
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(e.device_ids) = 'object'
                                       THEN e.device_ids ELSE '{}' END) n
    CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.value) = 'array'
                                                      THEN n.value ELSE '[]' END) d(device)
    WHERE e.op <> 'delete'
),
claim_events AS (
    SELECT e.store_id, e.seq, e.ts, e.op, e.resource, e.device_ids,
           row_number() OVER w AS rn, lead(e.ts) OVER w AS next_ts
    FROM fleet_events e
    WHERE e.op IN ('dra-set', 'dra-delete')
    WINDOW w AS (PARTITION BY e.store_id, e.resource ORDER BY e.seq)
),
claim_held AS (
    SELECT DISTINCT e.store_id, p.pod_uid, e.resource AS claim, r.key AS driver,
           (x.value ->> 'pool') || '/' || (x.value ->> 'device') AS device,
           e.device_ids ->> 'namespace' AS claim_namespace, e.rn, e.seq, e.ts, e.next_ts
    FROM claim_events e
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(e.device_ids -> 'pods') = 'array'
             THEN e.device_ids -> 'pods' ELSE '[]' END) p(pod_uid)
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(e.device_ids -> 'drivers') = 'object'
                                       THEN e.device_ids -> 'drivers' ELSE '{}' END) r
    CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(r.value) = 'array'
                                                 THEN r.value ELSE '[]' END) x
    WHERE e.op = 'dra-set'
),
runs AS (
    SELECT store_id, 'device-plugin' AS mechanism, resource, device, pod_uid, container,
           resource AS key_resource, CAST(NULL AS text) AS claim_namespace, seq, ts, next_ts,
           rn - row_number() OVER (PARTITION BY store_id, pod_uid, container, resource, device
                                   ORDER BY rn) AS grp
    FROM dp_held
    UNION ALL
    SELECT store_id, 'dra', driver, device, pod_uid, CAST(NULL AS text), claim,
           claim_namespace, seq, ts, next_ts,
           rn - row_number() OVER (PARTITION BY store_id, claim, pod_uid, driver, device
                                   ORDER BY rn)
    FROM claim_held
),
holdings AS (
    SELECT store_id, mechanism, resource, device, pod_uid, container, key_resource,
           max(claim_namespace) AS claim_namespace, min(seq) AS start_seq, min(ts) AS start,
           CASE WHEN bool_or(next_ts IS NULL) THEN NULL ELSE max(next_ts) END AS until_ts
    FROM runs
    GROUP BY store_id, mechanism, key_resource, pod_uid, container, resource, device, grp
),
ended AS MATERIALIZED (
    SELECT h.*, ev.at AS ev_at, ev.source AS ev_source
    FROM holdings h
    LEFT JOIN LATERAL (
        SELECT CAST(x.device_ids ->> 'at' AS timestamptz) AS at,
               x.device_ids ->> 'source' AS source
        FROM fleet_events x
        WHERE x.store_id = h.store_id AND x.pod_uid = h.pod_uid
          AND x.container IS NOT DISTINCT FROM h.container AND x.resource = h.key_resource
          AND x.seq > h.start_seq AND x.op = 'end'
          AND CAST(x.device_ids ->> 'at' AS timestamptz) >= h.start
          AND (h.until_ts IS NULL OR CAST(x.device_ids ->> 'at' AS timestamptz) < h.until_ts)
        ORDER BY 1, 2
        LIMIT 1
    ) ev ON true
)
SELECT s.node AS node, i.store_id AS store_id, i.mechanism AS mechanism,
       i.resource AS resource, i.device AS device,
       i.mechanism || ':' || i.resource || ':' || i.device AS physical_id, 1.0 AS share,
       i.pod_uid AS pod_uid,
       coalesce(pn.value ->> 'namespace',
                (SELECT n.device_ids ->> 'namespace' FROM fleet_events n
                 WHERE n.store_id = i.store_id AND n.pod_uid = i.pod_uid
                   AND n.container IS NULL AND n.resource = 'pod-name' AND n.op = 'node-set'
                 ORDER BY n.seq DESC LIMIT 1),
                i.claim_namespace) AS namespace,
       coalesce(pn.value ->> 'name',
                (SELECT n.device_ids ->> 'name' FROM fleet_events n
                 WHERE n.store_id = i.store_id AND n.pod_uid = i.pod_uid
                   AND n.container IS NULL AND n.resource = 'pod-name' AND n.op = 'node-set'
                 ORDER BY n.seq DESC LIMIT 1)) AS pod_name,
       i.container AS container, i.start AS start,
       coalesce(i.ev_at, i.until_ts) AS "end",
       CASE WHEN i.ev_at IS NOT NULL THEN i.ev_source
            WHEN i.until_ts IS NULL THEN NULL
            WHEN i.mechanism = 'dra' THEN 'dra'
            ELSE 'checkpoint' END AS end_source
FROM ended i
JOIN fleet_stores s ON s.store_id = i.store_id
LEFT JOIN fleet_node_items pn
  ON pn.store_id = i.store_id
 AND pn.item_key = CAST(jsonb_build_array(i.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
"""


def upgrade() -> None:
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint("ck_fleet_events_op", "fleet_events", f"op IN ({_BEFORE}, 'end')")
    readers = f0003._readers("v_fleet_device_owners")
    op.execute(V_FLEET_ALLOCATION_INTERVALS)
    for role in readers:
        op.execute(f"GRANT SELECT ON v_fleet_allocation_intervals TO {f0003._ident(role)}")


def downgrade() -> None:
    op.execute("DROP VIEW v_fleet_allocation_intervals")
    op.execute("DELETE FROM fleet_events WHERE op = 'end'")
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint("ck_fleet_events_op", "fleet_events", f"op IN ({_BEFORE})")
