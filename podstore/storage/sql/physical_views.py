"""The SQL views of physical devices (revision 0009): the public contract of docs/sql.md,
"Physical devices". Revision 0009 keeps a frozen copy of this text.

A device — of a device plugin (``resource``, device id) or of a DRA driver (``driver``,
``pool/device``) — is named by the host device nodes it gives a container, through the CDI
specs (``cdi_device_nodes``) and the plugin's response. Two devices are one card, or one is
a part of the other (a MIG partition and its whole GPU), when the nodes of one are all nodes
of the other: two MIG partitions of one GPU share the GPU's node but each has its own, so
neither holds the other. A device nothing resolves stands for itself
(``mechanism:resource:base``).
"""

from __future__ import annotations

# A time-sliced replica ``ID::N`` (N digits) is its base device ``ID``.
_BASE = """CASE
        WHEN rtrim({d}, '0123456789') LIKE '%_::'
             AND rtrim({d}, '0123456789') <> {d}
        THEN substr({d}, 1, length(rtrim({d}, '0123456789')) - 2)
        ELSE {d} END"""

# Every device: each device-plugin device held now or registered, each DRA device prepared;
# ``base`` is what its physical id stands for, and its nodes. A device-plugin device is
# resolved by a CDI name of its own (``resource=base``, or one of its response's CDI names
# naming ``base`` or the device); failing that, by everything its entry's response names
# (host paths and CDI names), which is the device's own when the entry holds one device.
_IDENTITY_CTES = f"""
held_dp (alloc_id, resource, device) AS MATERIALIZED (
    SELECT DISTINCT d.allocation_id, a.resource, d.device_id
    FROM allocation_devices d JOIN allocations a ON a.id = d.allocation_id
),
reg (resource, device, base) AS MATERIALIZED (
    SELECT resource, device_id, {_BASE.format(d="device_id")} FROM registered_devices
),
dp (alloc_id, resource, device, base) AS MATERIALIZED (
    SELECT alloc_id, resource, device, {_BASE.format(d="device")} FROM held_dp
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
)"""

V_DEVICE_IDENTITY = f"""
CREATE VIEW v_device_identity AS
WITH
{_IDENTITY_CTES}
SELECT mechanism, resource, device, physical_id, resolved, share FROM ident
"""

# Every holder now of a device: device plugins per (pod, container); DRA per (claim, pod),
# no container (a claim no pod uses yet: pod NULL), with the claim's namespace.
_HOLDERS = """
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
)"""

V_PHYSICAL_DEVICES = f"""
CREATE VIEW v_physical_devices AS
WITH
{_IDENTITY_CTES},{_HOLDERS}
SELECT i.physical_id AS physical_id, i.resolved AS resolved, h.mechanism AS mechanism,
       h.resource AS resource, h.device AS device, h.pod_uid AS pod_uid,
       coalesce(n.namespace, h.namespace) AS namespace, n.name AS pod_name,
       h.container AS container, i.share AS share
FROM holders h
JOIN ident i ON i.mechanism = h.mechanism AND i.resource = h.resource AND i.device = h.device
LEFT JOIN pod_names n ON n.pod_uid = h.pod_uid
"""

# Physical ids one within the other: every node of the first is a node of the second (a
# physical id is within itself). An unresolved id's one node is the id. Candidates come
# through each id's rarest node, so a node every device has (a control device) costs nothing.
_RELATED = """
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
)"""

# A holder's pod_count: the pods holding its card (or a part or the whole of it), less those
# whose every such holding shares it with the holder as declared (the holder's own pod is
# counted either way).
V_PHYSICAL_DOUBLE_ALLOCATIONS = f"""
CREATE VIEW v_physical_double_allocations AS
WITH
{_IDENTITY_CTES},{_HOLDERS},{_RELATED},
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

#: (name, CREATE statement) in creation order; drop in reverse.
PHYSICAL_VIEWS: tuple[tuple[str, str], ...] = (
    ("v_device_identity", V_DEVICE_IDENTITY),
    ("v_physical_devices", V_PHYSICAL_DEVICES),
    ("v_physical_double_allocations", V_PHYSICAL_DOUBLE_ALLOCATIONS),
)
