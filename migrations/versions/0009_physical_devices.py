"""Physical devices: the CDI devices' host device nodes, and the views over them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

One new table, ``cdi_device_nodes`` (per CDI spec file, each qualified device name and a host
device node it gives a container; filled by ``import-node`` and ``watch --kubelet-dir`` from
``--cdi-dir``), and the views of docs/sql.md, "Physical devices" (a frozen copy of
``storage/sql/physical_views.py`` as of this revision): ``v_device_identity``,
``v_physical_devices``, ``v_physical_double_allocations``. Nothing else changes; the upgrade
leaves the table empty (the next node import fills it). The downgrade drops the views and the
table: the CDI rows are node facts read again from the spec files, not history.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = """CREATE TABLE cdi_device_nodes (
    spec_path TEXT NOT NULL,
    name TEXT NOT NULL,
    host_path TEXT NOT NULL,
    CONSTRAINT pk_cdi_device_nodes PRIMARY KEY (spec_path, name, host_path)
) WITHOUT ROWID"""
_INDEX = "CREATE INDEX ix_cdi_device_nodes_name ON cdi_device_nodes (name, host_path)"

# ---- frozen SQL: storage/sql/physical_views.py as of this revision ---------------------------

_V_DEVICE_IDENTITY = """
CREATE VIEW v_device_identity AS
WITH

held_dp (alloc_id, resource, device) AS MATERIALIZED (
    SELECT DISTINCT d.allocation_id, a.resource, d.device_id
    FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id
),
reg (resource, device, base) AS MATERIALIZED (
    SELECT resource, device_id, CASE
        WHEN rtrim(device_id, '0123456789') LIKE '%_::'
             AND rtrim(device_id, '0123456789') <> device_id
        THEN substr(device_id, 1, length(rtrim(device_id, '0123456789')) - 2)
        ELSE device_id END FROM registered_devices
),
dp (alloc_id, resource, device, base) AS MATERIALIZED (
    SELECT alloc_id, resource, device, CASE
        WHEN rtrim(device, '0123456789') LIKE '%_::'
             AND rtrim(device, '0123456789') <> device
        THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
        ELSE device END FROM held_dp
    UNION ALL
    SELECT NULL, resource, device, base FROM reg r
    WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                      WHERE h.resource = r.resource AND h.device = r.device)
),
dp_own (resource, device, node) AS MATERIALIZED (
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN cdi_device_nodes n ON n.name = h.resource || '=' || h.base
    UNION
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN response_cdi_devices r ON r.allocation_id = h.alloc_id
    JOIN cdi_device_nodes n ON n.name = r.name
    WHERE substr(r.name, instr(r.name, '=') + 1) IN (h.base, h.device)
),
dp_entry (alloc_id, node) AS MATERIALIZED (
    SELECT allocation_id, host_path FROM response_devices WHERE host_path <> ''
    UNION
    SELECT r.allocation_id, n.host_path FROM response_cdi_devices r
    JOIN cdi_device_nodes n ON n.name = r.name
),
dp_nodes (resource, device, node) AS (
    SELECT resource, device, node FROM dp_own
    UNION
    SELECT h.resource, h.device, e.node FROM dp h
    JOIN dp_entry e ON e.alloc_id = h.alloc_id
    WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                      AND o.device = h.device)
),
dra (resource, device, holders) AS MATERIALIZED (
    SELECT d.driver, d.pool || '/' || d.device, count(*)
    FROM dra_devices d
    JOIN dra_claims c ON c.id = d.claim_id
    LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
    GROUP BY d.driver, d.pool, d.device
),
dra_nodes (resource, device, node) AS (
    SELECT DISTINCT d.driver, d.pool || '/' || d.device, n.host_path
    FROM dra_devices d, json_each(d.cdi_device_ids) j
    JOIN cdi_device_nodes n ON n.name = j.value
),
devs (mechanism, resource, device, base, share) AS (
    SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
           CASE WHEN h.base = h.device THEN 1.0 ELSE (
               SELECT 1.0 / nullif(count(*), 0) FROM reg g
               WHERE g.resource = h.resource AND g.base = h.base AND g.device <> g.base) END
    FROM dp h
    UNION ALL
    SELECT 'dra', resource, device, device, 1.0 / holders FROM dra
),
nodes (mechanism, resource, device, node) AS MATERIALIZED (
    SELECT 'device-plugin', resource, device, node FROM dp_nodes
    UNION ALL
    SELECT 'dra', resource, device, node FROM dra_nodes
),
ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
    SELECT v.mechanism, v.resource, v.device, v.base,
           coalesce((SELECT json_group_array(x.node) FROM (
                        SELECT n.node FROM nodes n
                        WHERE n.mechanism = v.mechanism AND n.resource = v.resource
                          AND n.device = v.device
                        ORDER BY n.node) x
                     HAVING count(*) > 0),
                    v.mechanism || ':' || v.resource || ':' || v.base),
           EXISTS (SELECT 1 FROM nodes n WHERE n.mechanism = v.mechanism
                   AND n.resource = v.resource AND n.device = v.device),
           v.share
    FROM devs v
)
SELECT mechanism, resource, device, physical_id, resolved, share FROM ident
"""

_V_PHYSICAL_DEVICES = """
CREATE VIEW v_physical_devices AS
WITH

held_dp (alloc_id, resource, device) AS MATERIALIZED (
    SELECT DISTINCT d.allocation_id, a.resource, d.device_id
    FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id
),
reg (resource, device, base) AS MATERIALIZED (
    SELECT resource, device_id, CASE
        WHEN rtrim(device_id, '0123456789') LIKE '%_::'
             AND rtrim(device_id, '0123456789') <> device_id
        THEN substr(device_id, 1, length(rtrim(device_id, '0123456789')) - 2)
        ELSE device_id END FROM registered_devices
),
dp (alloc_id, resource, device, base) AS MATERIALIZED (
    SELECT alloc_id, resource, device, CASE
        WHEN rtrim(device, '0123456789') LIKE '%_::'
             AND rtrim(device, '0123456789') <> device
        THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
        ELSE device END FROM held_dp
    UNION ALL
    SELECT NULL, resource, device, base FROM reg r
    WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                      WHERE h.resource = r.resource AND h.device = r.device)
),
dp_own (resource, device, node) AS MATERIALIZED (
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN cdi_device_nodes n ON n.name = h.resource || '=' || h.base
    UNION
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN response_cdi_devices r ON r.allocation_id = h.alloc_id
    JOIN cdi_device_nodes n ON n.name = r.name
    WHERE substr(r.name, instr(r.name, '=') + 1) IN (h.base, h.device)
),
dp_entry (alloc_id, node) AS MATERIALIZED (
    SELECT allocation_id, host_path FROM response_devices WHERE host_path <> ''
    UNION
    SELECT r.allocation_id, n.host_path FROM response_cdi_devices r
    JOIN cdi_device_nodes n ON n.name = r.name
),
dp_nodes (resource, device, node) AS (
    SELECT resource, device, node FROM dp_own
    UNION
    SELECT h.resource, h.device, e.node FROM dp h
    JOIN dp_entry e ON e.alloc_id = h.alloc_id
    WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                      AND o.device = h.device)
),
dra (resource, device, holders) AS MATERIALIZED (
    SELECT d.driver, d.pool || '/' || d.device, count(*)
    FROM dra_devices d
    JOIN dra_claims c ON c.id = d.claim_id
    LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
    GROUP BY d.driver, d.pool, d.device
),
dra_nodes (resource, device, node) AS (
    SELECT DISTINCT d.driver, d.pool || '/' || d.device, n.host_path
    FROM dra_devices d, json_each(d.cdi_device_ids) j
    JOIN cdi_device_nodes n ON n.name = j.value
),
devs (mechanism, resource, device, base, share) AS (
    SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
           CASE WHEN h.base = h.device THEN 1.0 ELSE (
               SELECT 1.0 / nullif(count(*), 0) FROM reg g
               WHERE g.resource = h.resource AND g.base = h.base AND g.device <> g.base) END
    FROM dp h
    UNION ALL
    SELECT 'dra', resource, device, device, 1.0 / holders FROM dra
),
nodes (mechanism, resource, device, node) AS MATERIALIZED (
    SELECT 'device-plugin', resource, device, node FROM dp_nodes
    UNION ALL
    SELECT 'dra', resource, device, node FROM dra_nodes
),
ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
    SELECT v.mechanism, v.resource, v.device, v.base,
           coalesce((SELECT json_group_array(x.node) FROM (
                        SELECT n.node FROM nodes n
                        WHERE n.mechanism = v.mechanism AND n.resource = v.resource
                          AND n.device = v.device
                        ORDER BY n.node) x
                     HAVING count(*) > 0),
                    v.mechanism || ':' || v.resource || ':' || v.base),
           EXISTS (SELECT 1 FROM nodes n WHERE n.mechanism = v.mechanism
                   AND n.resource = v.resource AND n.device = v.device),
           v.share
    FROM devs v
),
holders (mechanism, resource, device, pod_uid, container, namespace) AS (
    SELECT DISTINCT 'device-plugin', a.resource, d.device_id, p.uid, c.name, NULL
    FROM allocation_devices d
    JOIN allocations a ON a.id = d.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    UNION ALL
    SELECT 'dra', d.driver, d.pool || '/' || d.device, p.pod_uid, NULL, c.namespace
    FROM dra_devices d
    JOIN dra_claims c ON c.id = d.claim_id
    LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
)
SELECT i.physical_id AS physical_id, i.resolved AS resolved, h.mechanism AS mechanism,
       h.resource AS resource, h.device AS device, h.pod_uid AS pod_uid,
       coalesce(n.namespace, h.namespace) AS namespace, n.name AS pod_name,
       h.container AS container, i.share AS share
FROM holders h
JOIN ident i ON i.mechanism = h.mechanism AND i.resource = h.resource AND i.device = h.device
LEFT JOIN pod_names n ON n.pod_uid = h.pod_uid
"""

_V_PHYSICAL_DOUBLE_ALLOCATIONS = """
CREATE VIEW v_physical_double_allocations AS
WITH

held_dp (alloc_id, resource, device) AS MATERIALIZED (
    SELECT DISTINCT d.allocation_id, a.resource, d.device_id
    FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id
),
reg (resource, device, base) AS MATERIALIZED (
    SELECT resource, device_id, CASE
        WHEN rtrim(device_id, '0123456789') LIKE '%_::'
             AND rtrim(device_id, '0123456789') <> device_id
        THEN substr(device_id, 1, length(rtrim(device_id, '0123456789')) - 2)
        ELSE device_id END FROM registered_devices
),
dp (alloc_id, resource, device, base) AS MATERIALIZED (
    SELECT alloc_id, resource, device, CASE
        WHEN rtrim(device, '0123456789') LIKE '%_::'
             AND rtrim(device, '0123456789') <> device
        THEN substr(device, 1, length(rtrim(device, '0123456789')) - 2)
        ELSE device END FROM held_dp
    UNION ALL
    SELECT NULL, resource, device, base FROM reg r
    WHERE NOT EXISTS (SELECT 1 FROM held_dp h
                      WHERE h.resource = r.resource AND h.device = r.device)
),
dp_own (resource, device, node) AS MATERIALIZED (
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN cdi_device_nodes n ON n.name = h.resource || '=' || h.base
    UNION
    SELECT h.resource, h.device, n.host_path FROM dp h
    JOIN response_cdi_devices r ON r.allocation_id = h.alloc_id
    JOIN cdi_device_nodes n ON n.name = r.name
    WHERE substr(r.name, instr(r.name, '=') + 1) IN (h.base, h.device)
),
dp_entry (alloc_id, node) AS MATERIALIZED (
    SELECT allocation_id, host_path FROM response_devices WHERE host_path <> ''
    UNION
    SELECT r.allocation_id, n.host_path FROM response_cdi_devices r
    JOIN cdi_device_nodes n ON n.name = r.name
),
dp_nodes (resource, device, node) AS (
    SELECT resource, device, node FROM dp_own
    UNION
    SELECT h.resource, h.device, e.node FROM dp h
    JOIN dp_entry e ON e.alloc_id = h.alloc_id
    WHERE NOT EXISTS (SELECT 1 FROM dp_own o WHERE o.resource = h.resource
                      AND o.device = h.device)
),
dra (resource, device, holders) AS MATERIALIZED (
    SELECT d.driver, d.pool || '/' || d.device, count(*)
    FROM dra_devices d
    JOIN dra_claims c ON c.id = d.claim_id
    LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
    GROUP BY d.driver, d.pool, d.device
),
dra_nodes (resource, device, node) AS (
    SELECT DISTINCT d.driver, d.pool || '/' || d.device, n.host_path
    FROM dra_devices d, json_each(d.cdi_device_ids) j
    JOIN cdi_device_nodes n ON n.name = j.value
),
devs (mechanism, resource, device, base, share) AS (
    SELECT DISTINCT 'device-plugin', h.resource, h.device, h.base,
           CASE WHEN h.base = h.device THEN 1.0 ELSE (
               SELECT 1.0 / nullif(count(*), 0) FROM reg g
               WHERE g.resource = h.resource AND g.base = h.base AND g.device <> g.base) END
    FROM dp h
    UNION ALL
    SELECT 'dra', resource, device, device, 1.0 / holders FROM dra
),
nodes (mechanism, resource, device, node) AS MATERIALIZED (
    SELECT 'device-plugin', resource, device, node FROM dp_nodes
    UNION ALL
    SELECT 'dra', resource, device, node FROM dra_nodes
),
ident (mechanism, resource, device, base, physical_id, resolved, share) AS MATERIALIZED (
    SELECT v.mechanism, v.resource, v.device, v.base,
           coalesce((SELECT json_group_array(x.node) FROM (
                        SELECT n.node FROM nodes n
                        WHERE n.mechanism = v.mechanism AND n.resource = v.resource
                          AND n.device = v.device
                        ORDER BY n.node) x
                     HAVING count(*) > 0),
                    v.mechanism || ':' || v.resource || ':' || v.base),
           EXISTS (SELECT 1 FROM nodes n WHERE n.mechanism = v.mechanism
                   AND n.resource = v.resource AND n.device = v.device),
           v.share
    FROM devs v
),
holders (mechanism, resource, device, pod_uid, container, namespace) AS (
    SELECT DISTINCT 'device-plugin', a.resource, d.device_id, p.uid, c.name, NULL
    FROM allocation_devices d
    JOIN allocations a ON a.id = d.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    UNION ALL
    SELECT 'dra', d.driver, d.pool || '/' || d.device, p.pod_uid, NULL, c.namespace
    FROM dra_devices d
    JOIN dra_claims c ON c.id = d.claim_id
    LEFT JOIN dra_claim_pods p ON p.claim_id = c.id
),
pids (pid, resolved) AS MATERIALIZED (SELECT DISTINCT physical_id, resolved FROM ident),
pn (pid, node) AS MATERIALIZED (
    SELECT p.pid, j.value FROM pids p, json_each(p.pid) j WHERE p.resolved
    UNION ALL
    SELECT pid, pid FROM pids WHERE NOT resolved
),
width (node, c) AS MATERIALIZED (SELECT node, count(*) FROM pn GROUP BY node),
size (pid, n) AS MATERIALIZED (SELECT pid, count(*) FROM pn GROUP BY pid),
rare (pid, node, c) AS MATERIALIZED (
    SELECT pn.pid, pn.node, min(w.c) FROM pn JOIN width w ON w.node = pn.node GROUP BY pn.pid
),
within (part, whole) AS MATERIALIZED (
    SELECT r.pid, o.pid FROM rare r
    JOIN pn o ON o.node = r.node
    JOIN size s ON s.pid = r.pid
    WHERE (SELECT count(*) FROM pn a JOIN pn b ON b.node = a.node AND b.pid = o.pid
           WHERE a.pid = r.pid) = s.n
),
rel (pid, other) AS MATERIALIZED (
    SELECT part, whole FROM within UNION SELECT whole, part FROM within
),
-- Each holder with its physical id and the sharing it declared: holders of one group share
-- the card as declared — replicas of one time-sliced device, or one DRA device in several
-- claims (a ShareID, or admin access, which the checkpoint does not record: DRA's allocator
-- hands an allocated device to another claim for nothing else). NULL: exclusive.
held (pid, grp, mechanism, resource, device, pod_uid, container, namespace) AS MATERIALIZED (
    SELECT i.physical_id,
           CASE WHEN h.mechanism = 'dra' THEN 'dra|' || h.resource || '|' || h.device
                WHEN i.base <> h.device THEN 'replica|' || h.resource || '|' || i.base END,
           h.mechanism, h.resource, h.device, h.pod_uid, h.container, h.namespace
    FROM holders h
    JOIN ident i ON i.mechanism = h.mechanism AND i.resource = h.resource
     AND i.device = h.device
    WHERE h.pod_uid IS NOT NULL
),
-- Per physical id, each pod holding it or one within or around it, with the one group all
-- those holdings of the pod declared (NULL: none, or more than one).
pq (pid, pod_uid, grp, pods) AS MATERIALIZED (
    SELECT r.pid, x.pod_uid,
           CASE WHEN count(*) = count(x.grp) AND min(x.grp) = max(x.grp) THEN min(x.grp) END,
           count(*) OVER (PARTITION BY r.pid)
    FROM rel r JOIN held x ON x.pid = r.other
    GROUP BY r.pid, x.pod_uid
),
group_pods (pid, grp, pods) AS MATERIALIZED (
    SELECT pid, grp, count(*) FROM pq WHERE grp IS NOT NULL GROUP BY pid, grp
),
found (physical_id, mechanism, resource, device, pod_uid, namespace, pod_name, container,
       pod_count) AS MATERIALIZED (
    SELECT h.pid, h.mechanism, h.resource, h.device, h.pod_uid,
           coalesce(n.namespace, h.namespace), n.name, h.container,
           q.pods - coalesce(g.pods, 0) + coalesce(q.grp = h.grp, 0)
    FROM held h
    CROSS JOIN pq q ON q.pid = h.pid AND q.pod_uid = h.pod_uid
    LEFT JOIN group_pods g ON g.pid = h.pid AND g.grp = h.grp
    LEFT JOIN pod_names n ON n.pod_uid = h.pod_uid
)
-- Materialized whole: a query that aggregates over the view keeps this plan.
SELECT physical_id, mechanism, resource, device, pod_uid, namespace, pod_name, container,
       pod_count
FROM found WHERE pod_count > 1
"""

_VIEWS = (
    ("v_device_identity", _V_DEVICE_IDENTITY),
    ("v_physical_devices", _V_PHYSICAL_DEVICES),
    ("v_physical_double_allocations", _V_PHYSICAL_DOUBLE_ALLOCATIONS),
)


def upgrade() -> None:
    op.execute(_TABLE)
    op.execute(_INDEX)
    for _name, create in _VIEWS:
        op.execute(create)


def downgrade() -> None:
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    op.execute("DROP TABLE cdi_device_nodes")
