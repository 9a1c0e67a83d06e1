"""Allocation intervals: ``end`` events in the history, and the view ``v_allocation_intervals``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

The history takes a new op, ``end`` (storage/ends.py): the earliest evidence that a holder let
its devices go, recorded once, in the same log and chain. The ``op`` CHECK of
``allocation_events`` widens the way revision 0007 widened it (the stored CREATE text's op
list edited in place; every stored row stays valid). The view is a frozen copy of
``storage/sql/intervals.py`` as of this revision.

Downgrading drops the view, removes the ``end`` events the way ``prune_history`` removes
events (each kept event whose predecessor goes gets a ``history_chain_links`` row; when the
newest go, the floor and the next seq's link say where the chain stands) and narrows the CHECK.
The intervals' end evidence is lost; every other row stays.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
# The lead re-points this when the revisions between are merged.
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE_OPS = (
    "insert",
    "replace",
    "delete",
    "import",
    "backfill",
    "registered",
    "unregistered",
    "cpu-set",
    "cpu-delete",
    "memory-set",
    "memory-delete",
    "dra-set",
    "dra-delete",
    "node-set",
    "node-delete",
)
_END_OPS = ("end",)
FLOOR_KEY = "history_seq_floor"

# ---- frozen SQL: storage/sql/intervals.py as of this revision ----------------------------------

V_ALLOCATION_INTERVALS = """
CREATE VIEW v_allocation_intervals AS
WITH identity_now AS MATERIALIZED (
    SELECT mechanism, resource, device, physical_id, share FROM v_device_identity
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
       AND (h.until_ts IS NULL OR json_extract(x.device_ids, '$.at') < h.until_ts)) AS evidence
    FROM holdings h
),
i AS (
    SELECT mechanism, resource, device, pod_uid, container, start, start_seq,
           claim_namespace,
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
       coalesce(d.physical_id, i.mechanism || ':' || i.resource || ':' || i.device)
           AS physical_id,
       CASE WHEN i.mechanism = 'dra' AND i."end" IS NOT NULL THEN 1.0
            ELSE coalesce(d.share, 1.0) END AS share,
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
LEFT JOIN identity_now d
       ON d.mechanism = i.mechanism AND d.resource = i.resource AND d.device = i.device
"""


# ---- the op CHECK of allocation_events (as revision 0007 changes it) ---------------------------

_OP_CHECK = re.compile(r"(CHECK\s*\(\s*op\s+IN\s*\()([^)]*)(\)\s*\))", re.IGNORECASE)


def _ops_sql(ops: Sequence[str]) -> str:
    return ", ".join(f"'{o}'" for o in ops)


def _set_op_check(bind: sa.Connection, ops: Sequence[str]) -> None:
    (create,) = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'allocation_events'"
    ).one()
    found = _OP_CHECK.findall(create)
    if len(found) != 1:  # pragma: no cover - every revision since 0002 has exactly one
        raise RuntimeError("allocation_events has no single `CHECK (op IN (…))` to change")
    edited = _OP_CHECK.sub(lambda m: m.group(1) + _ops_sql(ops) + m.group(3), create)
    version = int(bind.exec_driver_sql("PRAGMA schema_version").scalar_one())
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        bind.exec_driver_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'allocation_events'",
            (edited,),
        )
        bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


# ---- downgrade: the end events go the way prune_history removes events -------------------------

_GOING = f"SELECT seq FROM allocation_events WHERE op IN ({_ops_sql(_END_OPS)})"
_HIGH_WATER = f"""
    SELECT max(coalesce((SELECT max(seq) FROM allocation_events), 0),
               coalesce((SELECT CAST(value AS INTEGER) FROM store_meta
                         WHERE key = '{FLOOR_KEY}'), 0))
"""
_LINKS = f"""
    INSERT INTO history_chain_links (seq, prev_hash)
    SELECT e.seq + 1, e.hash FROM allocation_events e
    WHERE e.seq IN ({_GOING})
      AND e.seq + 1 NOT IN ({_GOING})
      AND (e.seq = :high_water
           OR EXISTS (SELECT 1 FROM allocation_events k WHERE k.seq = e.seq + 1))
"""
_UNLINK = f"DELETE FROM history_chain_links WHERE seq IN ({_GOING})"
_DELETE = f"DELETE FROM allocation_events WHERE seq IN ({_GOING})"
_SET_FLOOR = f"""
    INSERT INTO store_meta (key, value) VALUES ('{FLOOR_KEY}', CAST(:seq AS TEXT))
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""


def _drop_end_events(bind: sa.Connection) -> None:
    top = int(bind.exec_driver_sql(_HIGH_WATER).scalar_one())
    bind.execute(sa.text(_LINKS), {"high_water": top})
    bind.exec_driver_sql(_UNLINK)
    removed = bind.exec_driver_sql(_DELETE).rowcount
    newest = bind.exec_driver_sql("SELECT max(seq) FROM allocation_events").scalar_one()
    if removed and (newest is None or int(newest) < top):
        bind.execute(sa.text(_SET_FLOOR), {"seq": top})


def upgrade() -> None:
    _set_op_check(op.get_bind(), _BEFORE_OPS + _END_OPS)
    op.execute(V_ALLOCATION_INTERVALS)


def downgrade() -> None:
    bind = op.get_bind()
    op.execute("DROP VIEW v_allocation_intervals")
    _drop_end_events(bind)
    _set_op_check(bind, _BEFORE_OPS)
