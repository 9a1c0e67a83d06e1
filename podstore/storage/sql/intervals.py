"""Allocation intervals from the history, the end evidence that closes them, and usage over a
window (docs/sql.md, "v_allocation_intervals"; docs/audit.md, "Chargeback").

An interval is one holder (pod, container, mechanism, resource, device) per uninterrupted
holding. Its start and its mechanism's own end come from the mechanism's events: the device
manager's entry events (by entry key) and the DRA manager's claim events (by claim). A device is
held after an event that lists it; a run of consecutive events of the key that list it is one
holding, and the key's next event (a ``delete``, or one that no longer lists it) ends it
(``checkpoint`` / ``dra``). ``end`` events (storage/ends.py) carry earlier evidence: the
earliest evidence time that falls inside the holding wins.

Revision 0011 keeps a frozen copy of the view's text (a test holds a store at head to it).
"""

from __future__ import annotations

from podstore.storage.sql.physical_views import _BASE

# The identity of a held device is v_device_identity's (revision 0009), which knows the devices
# held now or registered. A device it does not know (a DRA device no claim holds any more) is
# its own physical device. A holding's share is fixed when it begins, so that the billed past
# never changes (the device-seconds counter never goes down): a time-sliced replica's is
# 1/N, N the replicas of its base in the registration in force then; a DRA holding counts
# whole, open or finished (kubelet's file does not record the capacity a share consumed, and
# a split among the holders now would rewrite the past). With no registration in force in the
# history (pruned, or never recorded) the current one's share stands in; a replica whose
# count is unknown counts whole: billing it as nothing would hide it.
_IDENTITY_CTE = """identity_now AS MATERIALIZED (
    SELECT mechanism, resource, device, physical_id, share FROM v_device_identity
),
"""
# v_device_identity computed once, so that the join looks each interval's device up in it (an
# automatic index); joined as a view it was evaluated again for every interval (over 300 s for
# 151,000 intervals, against 6 s this way). Joined inside the materialized `ended`: in the
# outer query, a caller's WHERE on the times (usage, the counter) led SQLite to scan
# identity_now for every interval instead (9 of 12 s over a year of a 1,000-pod node whose
# devices are registered).
_IDENTITY_JOIN = """
    LEFT JOIN identity_now d
           ON d.mechanism = h.mechanism AND d.resource = h.resource AND d.device = h.device"""

# Per registration event, the replicas it lists of each base (``ID::N`` of ``ID``, not ``ID``
# itself): computed once, looked up by (event, base).
_REPLICAS_CTE = f"""replica_counts (seq, base, n) AS MATERIALIZED (
    SELECT seq, base, count(*) FROM (
        SELECT g.seq, r.value AS device, {_BASE.format(d="r.value")} AS base
        FROM allocation_events g, json_each(g.device_ids) r
        WHERE g.pod_uid IS NULL AND g.container IS NULL AND g.op = 'registered'
    )
    WHERE base <> device
    GROUP BY seq, base
),
"""
# The registration of the holding's resource in force at its start: the latest `registered` or
# `unregistered` event stamped at or before the start. Every event of the start's instant
# counts, later seqs included (the events the first one after it precedes): a sync writes its
# registrations before its entries, and one written at the same instant is of the same
# change. Both lookups are index-backed (the key index; the seq).
_SHARE = """
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
                i.now_share, 1.0) END AS share"""
_IDENTITY_COLUMNS = f"""
       coalesce(i.now_physical_id, i.mechanism || ':' || i.resource || ':' || i.device)
           AS physical_id,{_SHARE}"""

# The entry ops that set an entry's devices; `delete` ends the entry.
_ENTRY_OPS = "'insert', 'replace', 'import', 'backfill', 'delete'"

# Per interval: the earliest recorded end evidence of its holder inside the holding, as
# "<at>|<source>" (fixed-width times: the text's minimum is the earliest).
_EVIDENCE = """
    (SELECT min(json_extract(x.device_ids, '$.at') || '|' || json_extract(x.device_ids, '$.source'))
     FROM allocation_events x
     WHERE x.pod_uid = h.pod_uid AND x.container IS h.container AND x.resource = h.key_resource
       AND x.seq > h.start_seq AND x.op = 'end'
       AND json_extract(x.device_ids, '$.at') >= h.start
       AND (h.until_ts IS NULL OR json_extract(x.device_ids, '$.at') < h.until_ts))"""

# The pod's namespace and name: as held now, else as the history last named it.
_NAME = """
    (SELECT json_extract(n.device_ids, '$.{field}') FROM allocation_events n
     WHERE n.pod_uid = i.pod_uid AND n.container IS NULL AND n.resource = 'pod-name'
       AND n.op = 'node-set'
     ORDER BY n.seq DESC LIMIT 1)"""

V_ALLOCATION_INTERVALS = f"""
CREATE VIEW v_allocation_intervals AS
WITH {_IDENTITY_CTE}{_REPLICAS_CTE}dp_events AS (
    SELECT seq, ts, op, pod_uid, container, resource, device_ids,
           row_number() OVER w AS rn,
           lead(seq) OVER w AS next_seq, lead(ts) OVER w AS next_ts
    FROM allocation_events
    WHERE pod_uid IS NOT NULL AND op IN ({_ENTRY_OPS})
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
    SELECT h.*,{_EVIDENCE} AS evidence,
           d.physical_id AS now_physical_id, d.share AS now_share
    FROM holdings h{_IDENTITY_JOIN}
),
i AS (
    SELECT mechanism, resource, device, pod_uid, container, start, start_seq,
           claim_namespace, now_physical_id, now_share, {_BASE.format(d="device")} AS base,
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
SELECT i.mechanism AS mechanism, i.resource AS resource, i.device AS device,{_IDENTITY_COLUMNS},
       i.pod_uid AS pod_uid,
       coalesce(pn.namespace,{_NAME.format(field="namespace")},
                i.claim_namespace) AS namespace,
       coalesce(pn.name,{_NAME.format(field="name")}) AS pod_name,
       i.container AS container, i.start AS start, i."end" AS "end",
       i.end_source AS end_source, i.start_cut AS start_cut
FROM i
LEFT JOIN pod_names pn ON pn.pod_uid = i.pod_uid
"""

INTERVAL_VIEWS = (("v_allocation_intervals", V_ALLOCATION_INTERVALS),)

# ---- usage over a window (podstore usage) ------------------------------------------------------

#: The groups ``podstore usage --by`` knows, and the columns each groups by.
USAGE_GROUPS: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace",),
    "pod": ("namespace", "pod_name", "pod_uid"),
    "resource": ("resource",),
    "physical": ("physical_id",),
}


def _epoch(ts: str) -> str:
    """Seconds since the epoch of a stored time, exact to the microsecond: whole seconds from
    the text without its fraction (SQLite's own parse rounds to milliseconds, so .9996 s would
    count as the next second), then the fraction (julianday's double of days loses tens of
    microseconds per value)."""
    return (
        f"(CAST(strftime('%s', substr({ts}, 1, 19)) AS INTEGER)"
        f" + CAST(substr({ts}, 20, 7) AS REAL))"
    )


def usage_sql(by: str, resource: bool) -> str:
    """Device-seconds per group over ``[:since, :until)``: each interval clipped to the window,
    an open one counted to ``:until``, times its share. ``resource``: only ``:resource``."""
    columns = USAGE_GROUPS[by]
    keys = ", ".join(columns)
    where = " AND resource = :resource" if resource else ""
    until = _epoch('min(coalesce("end", :until), :until)')
    since = _epoch("max(start, :since)")
    return f"""
    SELECT {keys}, sum(seconds) AS device_seconds, count(*) AS intervals
    FROM (
        SELECT {keys}, share * ({until} - {since}) AS seconds
        FROM v_allocation_intervals
        WHERE start < :until AND ("end" IS NULL OR "end" > :since){where}
    )
    GROUP BY {keys}
    ORDER BY {keys}
    """


#: Device-seconds per (resource, namespace) the history's intervals hold up to ``:until``.
INTERVAL_SECONDS = f"""
    SELECT resource, coalesce(namespace, '') AS namespace,
           sum(share * ({_epoch('min(coalesce("end", :until), :until)')} - {_epoch("start")}))
               AS seconds
    FROM v_allocation_intervals
    WHERE start < :until
    GROUP BY resource, coalesce(namespace, '')
"""

#: The counter's value up to ``:until`` (the metrics collector's scrape time): the intervals'
#: seconds and what pruning took off them (revision 0012), so that a prune is no reset.
DEVICE_SECONDS = f"""
    SELECT resource, namespace, sum(seconds) FROM (
        {INTERVAL_SECONDS.strip()}
        UNION ALL
        SELECT resource, namespace, seconds FROM device_seconds_pruned
    )
    GROUP BY resource, namespace
"""

#: ``prune_history`` adds what it took off the intervals' seconds.
ADD_PRUNED_SECONDS = """
    INSERT INTO device_seconds_pruned (resource, namespace, seconds) VALUES (?, ?, ?)
    ON CONFLICT (resource, namespace) DO UPDATE SET seconds = seconds + excluded.seconds
"""

# ---- recording end evidence (storage/ends.py) --------------------------------------------------

#: The entry keys a pod (or one of its containers) ever held, by the history.
ENTRY_KEYS_OF_POD = f"""
    SELECT DISTINCT container, resource FROM allocation_events
    WHERE pod_uid = ? AND op IN ({_ENTRY_OPS})
"""
ENTRY_KEYS_OF_CONTAINER = f"""
    SELECT DISTINCT container, resource FROM allocation_events
    WHERE pod_uid = ? AND container = ? AND op IN ({_ENTRY_OPS})
"""
ENTRY_EVENTS = f"""
    SELECT seq, ts, op, device_ids FROM allocation_events
    WHERE pod_uid = ? AND container IS ? AND resource = ? AND op IN ({_ENTRY_OPS})
    ORDER BY seq
"""
#: The DRA claims that list a pod now, as their history key.
CLAIMS_OF_POD = """
    SELECT 'dra:' || c.claim_uid FROM dra_claim_pods p JOIN dra_claims c ON c.id = p.claim_id
    WHERE p.pod_uid = ?
"""
CLAIM_EVENTS = """
    SELECT seq, ts, op, device_ids FROM allocation_events
    WHERE pod_uid IS NULL AND container IS NULL AND resource = ?
      AND op IN ('dra-set', 'dra-delete')
    ORDER BY seq
"""
#: The end evidence recorded for a holder's key: (seq, at).
END_EVENTS = """
    SELECT seq, json_extract(device_ids, '$.at') FROM allocation_events
    WHERE pod_uid = ? AND container IS ? AND resource = ? AND op = 'end'
"""
