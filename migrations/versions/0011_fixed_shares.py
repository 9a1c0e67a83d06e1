"""Holding shares fixed when each holding begins: ``v_allocation_intervals`` re-created.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

Revision 0010's view took each holding's share from ``v_device_identity``, the devices as they
are now: a time-sliced replica was billed 1/N with N the replicas registered now, and an open
DRA holding the split among the device's holders now, so the billed past (``podstore usage``
over a past window, ``podstore_device_seconds_total``) changed after the fact, the counter
going down. This view fixes a replica's share from the registration in force when the holding
began (the history's ``registered`` events), the current one only where the history has none,
and counts a DRA holding whole. The view is a frozen copy of ``storage/sql/intervals.py`` as
of this revision; no table changes.

Downgrading re-creates revision 0010's view (its own frozen copy).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from types import ModuleType

from alembic import op

revision: str = "0011"
# The lead re-points this when the revisions between are merged.
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# ---- frozen SQL: storage/sql/intervals.py as of this revision ----------------------------------

V_ALLOCATION_INTERVALS = """
CREATE VIEW v_allocation_intervals AS
WITH identity_now AS MATERIALIZED (
    SELECT mechanism, resource, device, physical_id, share FROM v_device_identity
),
replica_counts (seq, base, n) AS MATERIALIZED (
    SELECT seq, base, count(*) FROM (
        SELECT g.seq, r.value AS device, CASE
        WHEN rtrim(r.value, '0123456789') LIKE '%_::'
             AND rtrim(r.value, '0123456789') <> r.value
        THEN substr(r.value, 1, length(rtrim(r.value, '0123456789')) - 2)
        ELSE r.value END AS base
        FROM allocation_events g, json_each(g.device_ids) r
        WHERE g.pod_uid IS NULL AND g.container IS NULL AND g.op = 'registered'
    )
    WHERE base <> device
    GROUP BY seq, base
),
dp_events AS (
    SELECT seq, ts, op, pod_uid, container, resource, device_ids,
           row_number() OVER w AS rn,
           lead(seq) OVER w AS next_seq, lead(ts) OVER w AS next_ts
    FROM allocation_events
    WHERE pod_uid IS NOT NULL AND op IN ('insert', 'replace', 'import', 'backfill', 'delete')
    WINDOW w AS (PARTITION BY pod_uid, container, resource ORDER BY seq)
),
dp_held AS (
    SELECT DISTINCT e.pod_uid, e.container, e.resource, d.value AS device,
           e.rn, e.seq, e.ts, e.next_seq, e.next_ts
    FROM dp_events e, json_each(e.device_ids) n, json_each(n.value) d
    WHERE e.op <> 'delete'
),
dra_events AS (
    SELECT seq, ts, op, resource, device_ids,
           row_number() OVER w AS rn,
           lead(seq) OVER w AS next_seq, lead(ts) OVER w AS next_ts
    FROM allocation_events
    WHERE op IN ('dra-set', 'dra-delete')
    WINDOW w AS (PARTITION BY resource ORDER BY seq)
),
dra_held AS (
    SELECT DISTINCT p.value AS pod_uid, e.resource AS claim, r.key AS driver,
           json_extract(x.value, '$.pool') || '/' || json_extract(x.value, '$.device') AS device,
           json_extract(e.device_ids, '$.namespace') AS claim_namespace,
           e.rn, e.seq, e.ts, e.next_seq, e.next_ts
    FROM dra_events e, json_each(e.device_ids, '$.pods') p,
         json_each(e.device_ids, '$.drivers') r, json_each(r.value) x
    WHERE e.op = 'dra-set'
),
runs AS (
    SELECT 'device-plugin' AS mechanism, resource, device, pod_uid, container,
           resource AS key_resource, NULL AS claim_namespace, rn, seq, ts, next_seq, next_ts,
           rn - row_number() OVER (PARTITION BY pod_uid, container, resource, device
                                   ORDER BY rn) AS grp
    FROM dp_held
    UNION ALL
    SELECT 'dra', driver, device, pod_uid, NULL, claim, claim_namespace, rn, seq, ts,
           next_seq, next_ts,
           rn - row_number() OVER (PARTITION BY claim, pod_uid, driver, device ORDER BY rn)
    FROM dra_held
),
holdings AS (
    SELECT mechanism, resource, device, pod_uid, container, key_resource,
           max(claim_namespace) AS claim_namespace,
           min(rn) AS first_rn, min(seq) AS start_seq, min(ts) AS start,
           -- Only the run's last event lacks a successor: '~' sorts after every time.
           nullif(max(coalesce(next_ts, '~')), '~') AS until_ts
    FROM runs
    GROUP BY mechanism, key_resource, pod_uid, container, resource, device, grp
),
ended AS MATERIALIZED (
    SELECT h.*,
    (SELECT min(json_extract(x.device_ids, '$.at') || '|' || json_extract(x.device_ids, '$.source'))
     FROM allocation_events x
     WHERE x.pod_uid = h.pod_uid AND x.container IS h.container AND x.resource = h.key_resource
       AND x.seq > h.start_seq AND x.op = 'end'
       AND json_extract(x.device_ids, '$.at') >= h.start
       AND (h.until_ts IS NULL OR json_extract(x.device_ids, '$.at') < h.until_ts)) AS evidence,
           d.physical_id AS now_physical_id, d.share AS now_share
    FROM holdings h
    LEFT JOIN identity_now d
           ON d.mechanism = h.mechanism AND d.resource = h.resource AND d.device = h.device
),
i AS (
    SELECT mechanism, resource, device, pod_uid, container, start, start_seq,
           claim_namespace, now_physical_id, now_share, CASE
        WHEN rtrim(device, '0123456789') LIKE '%_::'
             AND rtrim(device, '0123456789') <> device
        THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
        ELSE device END AS base,
           CASE WHEN evidence IS NOT NULL THEN substr(evidence, 1, instr(evidence, '|') - 1)
                ELSE until_ts END AS "end",
           CASE WHEN evidence IS NOT NULL THEN substr(evidence, instr(evidence, '|') + 1)
                WHEN until_ts IS NULL THEN NULL
                WHEN mechanism = 'dra' THEN 'dra'
                ELSE 'checkpoint' END AS end_source,
           -- The holding's first kept event, not an entry's creation, with the history
           -- pruned before it: it may have begun earlier than `start`.
           CASE WHEN first_rn = 1
                     AND (SELECT op FROM allocation_events WHERE seq = start_seq) <> 'insert'
                     AND EXISTS (SELECT 1 FROM history_chain_links l WHERE l.seq <= start_seq)
                THEN 1 ELSE 0 END AS start_cut
    FROM ended
)
SELECT i.mechanism AS mechanism, i.resource AS resource, i.device AS device,
       coalesce(i.now_physical_id, i.mechanism || ':' || i.resource || ':' || i.device)
           AS physical_id,
       CASE WHEN i.mechanism = 'dra' OR i.base = i.device THEN 1.0
            ELSE coalesce(
    (SELECT CASE WHEN g.op = 'registered' THEN coalesce(1.0 / (
                SELECT c.n FROM replica_counts c WHERE c.seq = g.seq AND c.base = i.base), 1.0)
            END
     FROM allocation_events g
     WHERE g.pod_uid IS NULL AND g.container IS NULL AND g.resource = i.resource
       AND g.op IN ('registered', 'unregistered')
       AND g.seq < coalesce((SELECT x.seq FROM allocation_events x
                             WHERE x.seq > i.start_seq AND x.ts > i.start
                             ORDER BY x.seq LIMIT 1), 9223372036854775807)
     ORDER BY g.seq DESC LIMIT 1),
                i.now_share, 1.0) END AS share,
       i.pod_uid AS pod_uid,
       coalesce(pn.namespace,
    (SELECT json_extract(n.device_ids, '$.namespace') FROM allocation_events n
     WHERE n.pod_uid = i.pod_uid AND n.container IS NULL AND n.resource = 'pod-name'
       AND n.op = 'node-set'
     ORDER BY n.seq DESC LIMIT 1),
                i.claim_namespace) AS namespace,
       coalesce(pn.name,
    (SELECT json_extract(n.device_ids, '$.name') FROM allocation_events n
     WHERE n.pod_uid = i.pod_uid AND n.container IS NULL AND n.resource = 'pod-name'
       AND n.op = 'node-set'
     ORDER BY n.seq DESC LIMIT 1)) AS pod_name,
       i.container AS container, i.start AS start, i."end" AS "end",
       i.end_source AS end_source, i.start_cut AS start_cut
FROM i
LEFT JOIN pod_names pn ON pn.pod_uid = i.pod_uid
"""


def _revision_0010() -> ModuleType:
    """Revision 0010's module, for the frozen text of the view it created."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "0010_allocation_intervals.py")
    spec = importlib.util.spec_from_file_location("podstore_migration_0010", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute("DROP VIEW v_allocation_intervals")
    op.execute(V_ALLOCATION_INTERVALS)


def downgrade() -> None:
    op.execute("DROP VIEW v_allocation_intervals")
    op.execute(_revision_0010().V_ALLOCATION_INTERVALS)
