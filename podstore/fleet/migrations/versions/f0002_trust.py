"""Round 2, trust: the history's hash chain, one node per store, retirement, per-node rights.

Revision ID: f0002
Revises: f0001
Create Date: 2026-12-05

- ``fleet_events`` keeps what the node's hash chain covers, so the fleet recomputes it
  (``device_ids_text``: the node's JSON text as written, which jsonb would reorder;
  ``released``; ``hash``). Events shipped before this revision have no hash: the store's
  first chained batch anchors on the chain value the node sends, recorded in
  ``fleet_chain_links`` (reason ``adopted``) and ``fleet_store_log``.
- ``fleet_stores`` gains the chain head, the counters ``fleet nodes`` shows (kept by the
  shipping functions instead of counted per call), the refusals and ``retired_at``.
- Shipping goes through three SECURITY DEFINER functions (``fleet_ship_open``,
  ``fleet_ship_batch``, ``fleet_ship_snapshot``), owned by the schema owner, with a fixed
  search_path and EXECUTE revoked from PUBLIC: they check the caller may ship for the node
  (``fleet_node_grants``), that the store is that node's, and that the batch continues the
  chain the fleet holds (every hash recomputed with sha256), and they write the events and the
  state those events produce. ``podstore fleet grant-node`` gives a role EXECUTE on them and
  nothing else.
- The current-state views leave retired stores out.
- The node's CPU, memory and DRA managers' events and its topology and pod-name events
  (node revision 0007: ``cpu-set`` … ``node-delete``) travel in the same chain: the fleet
  keeps and re-checks them as history; only device events move the device state
  (``fleet_entries``, ``fleet_allocations``, ``fleet_registered``), and only they list devices
  in ``fleet_events.devices``.

Spelled out here (functions and views as frozen text) so that later changes to the package
never rewrite what this revision means.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f0002"
down_revision: str | None = "f0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The ops of events that move the device state; the node's other events (its CPU, memory and
# DRA managers, topology, pod names) are history in the same chain.
_ENTRY_OPS = "'insert', 'replace', 'delete', 'import', 'backfill'"
_DEVICE_OPS = f"{_ENTRY_OPS}, 'registered', 'unregistered'"
_NODE_OPS = (
    "'cpu-set', 'cpu-delete', 'memory-set', 'memory-delete', 'dra-set', 'dra-delete', "
    "'node-set', 'node-delete'"
)

# ---- pure functions: the chain's byte rule (podstore/pure/chain.py), callable by anyone ------
#
# SQL-standard bodies (RETURN ...): parsed when created, so what they call is bound then and no
# search_path at call time can redirect it; simple enough to be inlined into the queries.

_PURE = (
    """
CREATE FUNCTION fleet_chain_field(v text) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN v IS NULL THEN decode('00', 'hex')
       ELSE decode('01', 'hex') || int4send(octet_length(convert_to(v, 'UTF8')))
            || convert_to(v, 'UTF8') END
""",
    """
CREATE FUNCTION fleet_ts_text(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
""",
    """
CREATE FUNCTION fleet_event_canonical(
    seq bigint, ts timestamptz, op text, pod_uid text, container text, resource text,
    device_ids text, released text) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN fleet_chain_field(CAST(seq AS text)) || fleet_chain_field(fleet_ts_text(ts))
       || fleet_chain_field(op) || fleet_chain_field(pod_uid) || fleet_chain_field(container)
       || fleet_chain_field(resource) || fleet_chain_field(device_ids)
       || fleet_chain_field(released)
""",
    """
CREATE FUNCTION fleet_chain_genesis(store_id uuid) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(convert_to('podstore-history-chain-v1', 'UTF8') || decode('00', 'hex')
              || convert_to(CAST(store_id AS text), 'UTF8'))
""",
    # Every device an event names (the node's allocation_event_devices, without those a
    # replace released): the strings in the NUMA map's lists of an entry event, in the list
    # of a registered-devices event. One path query: no subquery per list.
    """
CREATE FUNCTION fleet_device_path(pod_uid text) RETURNS jsonpath
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN pod_uid IS NULL THEN CAST('$[*] ? (@.type() == "string")' AS jsonpath)
            ELSE CAST('$.*[*] ? (@.type() == "string")' AS jsonpath) END
""",
    """
CREATE FUNCTION fleet_event_devices(pod_uid text, device_ids jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(SELECT jsonb_array_elements_text(
                 jsonb_path_query_array(device_ids, fleet_device_path(pod_uid))))
""",
)

_PURE_NAMES = (
    "fleet_event_devices(text, jsonb)",
    "fleet_device_path(text)",
    "fleet_chain_genesis(uuid)",
    "fleet_event_canonical(bigint, timestamptz, text, text, text, text, text, text)",
    "fleet_ts_text(timestamptz)",
    "fleet_chain_field(text)",
)

# ---- the shipping path ----------------------------------------------------------------------
#
# @SCHEMA@ is the schema the fleet tables are created in (quoted), fixed in every function's
# search_path so that no object a caller creates elsewhere can stand in for one of them.

# A node event as the shipping functions take it: the fields its hash covers, and the hash.
_EVENT_IN = """
CREATE TYPE fleet_event_in AS (
    seq bigint, ts timestamptz, op text, pod_uid text, container text, resource text,
    device_ids text, released text, hash bytea)
"""

# The events of a batch as they travel: a JSON array with one array per event, its fields in
# the order of fleet_event_in (device_ids and released as the node's JSON text, which the hash
# covers byte for byte), and the hashes apart, 32 bytes each in the same order. An SQL function
# returning a set, without SET clauses: inlined into the statement that reads it, so the wire
# format is written once for every shipping function. (Arrays, not objects, and the hashes as
# bytes: a third of the server's and half of the client's time to pack and unpack a batch.)
_EVENTS_IN = """
CREATE FUNCTION fleet_events_in(p_events jsonb, p_hashes bytea) RETURNS SETOF fleet_event_in
LANGUAGE sql STABLE
AS $fn$
    SELECT CAST(e ->> 0 AS bigint), CAST(e ->> 1 AS timestamptz), e ->> 2, e ->> 3, e ->> 4,
           e ->> 5, e ->> 6, e ->> 7, substring(p_hashes FROM CAST(i AS integer) * 32 - 31 FOR 32)
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x (e, i)
    ORDER BY 1
$fn$
"""
_EVENTS_IN_NAME = "fleet_events_in(jsonb, bytea)"

_SETTINGS = (
    "SET search_path = pg_catalog, @SCHEMA@, pg_temp SET jit = off "
    "SET plan_cache_mode = force_generic_plan"
)

_PATH = (
    # May the session's login role ship for this node? The schema owner's members (and
    # superusers) may ship for any; a role granted with `fleet grant-node` for its node only.
    f"""
CREATE FUNCTION fleet_may_ship(p_node text) RETURNS boolean
LANGUAGE plpgsql STABLE {_SETTINGS}
AS $fn$
BEGIN
    RETURN pg_has_role(session_user,
                       (SELECT c.relowner FROM pg_class c
                        WHERE c.oid = CAST('@SCHEMA@.fleet_stores' AS regclass)), 'MEMBER')
        OR EXISTS (SELECT 1 FROM fleet_node_grants g JOIN pg_roles r ON r.rolname = g.role_name
                   WHERE g.node = p_node AND pg_has_role(session_user, r.oid, 'MEMBER'));
END
$fn$
""",
    # The store's row, locked for this transaction (created for p_node on its first ship).
    # Shippers of one store queue here; SELECT ... FOR UPDATE returns the latest committed
    # version of the row once the lock is granted.
    f"""
CREATE FUNCTION fleet_ship_lock(p_store_id uuid, p_node text) RETURNS fleet_stores
LANGUAGE plpgsql {_SETTINGS}
AS $fn$
DECLARE
    st fleet_stores;
BEGIN
    IF p_store_id IS NULL OR p_node IS NULL OR p_node = '' THEN
        RAISE EXCEPTION 'fleet shipping: a store_id and a node name are needed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT fleet_may_ship(p_node) THEN
        RAISE EXCEPTION 'permission denied: role % may not ship for node %',
            session_user, p_node USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO fleet_stores (store_id, node) VALUES (p_store_id, p_node)
    ON CONFLICT (store_id) DO NOTHING;
    SELECT * INTO STRICT st FROM fleet_stores WHERE store_id = p_store_id FOR UPDATE;
    RETURN st;
END
$fn$
""",
    # Count a refusal on the store and return its text (the caller commits it, and nothing
    # else: the refused batch was never written).
    f"""
CREATE FUNCTION fleet_ship_refuse(p_store_id uuid, p_reason text) RETURNS text
LANGUAGE sql {_SETTINGS}
AS $fn$
    UPDATE fleet_stores
    SET refusals = refusals + 1, last_refusal = p_reason, last_refusal_at = now()
    WHERE store_id = p_store_id
    RETURNING p_reason
$fn$
""",
    # Why this node may not ship this store (counted), or NULL.
    f"""
CREATE FUNCTION fleet_ship_check(st fleet_stores, p_node text) RETURNS text
LANGUAGE plpgsql {_SETTINGS}
AS $fn$
BEGIN
    IF st.retired_at IS NOT NULL THEN
        RETURN fleet_ship_refuse(st.store_id, format(
            'refused: store %s (node %s) was retired from the fleet at %s and ships no more; '
            'a wiped or re-created store needs a new identity: podstore reset-identity',
            st.store_id, st.node, fleet_ts_text(st.retired_at)));
    END IF;
    IF st.node <> p_node THEN
        RETURN fleet_ship_refuse(st.store_id, format(
            'refused: store %s belongs to another node, %s (its first shipper); this ship '
            'names node %s. A copy of that node''s store (a cloned disk or image) needs its '
            'own identity: podstore reset-identity; a node that was renamed: podstore fleet '
            'rename-node %s %s',
            st.store_id, st.node, p_node, st.node, p_node));
    END IF;
    RETURN NULL;
END
$fn$
""",
    # What the store's next event must chain from: the head the fleet holds, the genesis of a
    # store never shipped, or NULL for history shipped before the chain (adopted).
    f"""
CREATE FUNCTION fleet_chain_expected(st fleet_stores) RETURNS bytea
LANGUAGE plpgsql {_SETTINGS}
AS $fn$
BEGIN
    RETURN CASE WHEN st.head_hash IS NOT NULL THEN st.head_hash
                WHEN st.last_seq = 0 THEN fleet_chain_genesis(st.store_id) END;
END
$fn$
""",
    f"""
CREATE FUNCTION fleet_ship_open(p_store_id uuid, p_node text)
RETURNS TABLE (last_seq bigint, head_hash bytea, refused text)
LANGUAGE plpgsql SECURITY DEFINER {_SETTINGS}
AS $fn$
DECLARE
    st fleet_stores;
BEGIN
    st := fleet_ship_lock(p_store_id, p_node);
    RETURN QUERY SELECT st.last_seq, st.head_hash, fleet_ship_check(st, p_node);
END
$fn$
""",
    f"""
CREATE FUNCTION fleet_ship_batch(
    p_store_id uuid, p_node text, p_node_high bigint, p_prev bytea, p_events jsonb,
    p_hashes bytea)
RETURNS TABLE (shipped bigint, refused text)
LANGUAGE plpgsql SECURITY DEFINER {_SETTINGS}
-- Sorts, not hash tables: the generic plans' row estimates for the unpacked batch are far too
-- high (jsonb_each and the like count 100 rows each), and hash tables sized for them cost more
-- to build and scan than the batch does; nor a cache of each NUMA node's device list.
SET enable_hashagg = off SET enable_memoize = off
AS $fn$
DECLARE
    st fleet_stores;
    l_reason text;
    l_expect bytea;
    l_rows fleet_event_in[];
    l_n bigint;
    l_bad bigint;
    l_misplaced boolean;
BEGIN
    st := fleet_ship_lock(p_store_id, p_node);
    l_reason := fleet_ship_check(st, p_node);
    IF l_reason IS NOT NULL THEN
        RETURN QUERY SELECT CAST(0 AS bigint), l_reason;
        RETURN;
    END IF;
    IF p_prev IS NULL OR length(p_prev) <> 32 OR p_node_high IS NULL THEN
        RAISE EXCEPTION 'fleet_ship_batch: the chain value at seq % (32 bytes) and the '
            'node''s newest seq are needed', st.last_seq USING ERRCODE = 'PS001';
    END IF;
    IF p_node_high < st.last_seq THEN
        RETURN QUERY SELECT CAST(0 AS bigint), fleet_ship_refuse(p_store_id, format(
            'refused: store %s diverged from the fleet''s copy: its history ends at seq %s, '
            'but the fleet holds it up to seq %s (an older copy of the store file, or another '
            'store under this identity); nothing was written',
            p_store_id, p_node_high, st.last_seq));
        RETURN;
    END IF;
    l_expect := fleet_chain_expected(st);
    IF l_expect IS NOT NULL AND p_prev <> l_expect THEN
        RETURN QUERY SELECT CAST(0 AS bigint), fleet_ship_refuse(p_store_id, format(
            'refused: store %s diverged from the fleet''s copy at seq %s: the node''s chain '
            'there is %s, the fleet holds %s (a clone, or a history edited or replaced); '
            'nothing was written',
            p_store_id, st.last_seq, encode(p_prev, 'hex'), encode(l_expect, 'hex')));
        RETURN;
    END IF;
    -- One pass over the batch: unpacked, checked to be the seqs last_seq + 1, + 2, ... in
    -- order without a hole, and every hash recomputed — the first from what the chain held,
    -- each next from the one before it (itself checked), so the whole batch continues the
    -- fleet's chain.
    SELECT array_agg(CAST(ROW(c.seq, c.ts, c.op, c.pod_uid, c.container, c.resource,
                              c.device_ids, c.released, c.hash) AS fleet_event_in)
                     ORDER BY c.seq),
           min(c.seq) FILTER (WHERE c.hash IS DISTINCT FROM c.expect),
           bool_or(c.seq IS DISTINCT FROM st.last_seq + c.pos)
    INTO l_rows, l_bad, l_misplaced
    FROM (SELECT e.*, row_number() OVER w AS pos,
                 sha256(coalesce(lag(e.hash) OVER w, p_prev)
                        || fleet_event_canonical(e.seq, e.ts, e.op, e.pod_uid, e.container,
                                                 e.resource, e.device_ids, e.released))
                     AS expect
          FROM fleet_events_in(p_events, p_hashes) e
          WINDOW w AS (ORDER BY e.seq)) c;
    l_n := coalesce(cardinality(l_rows), 0);
    IF l_misplaced OR st.last_seq + l_n > p_node_high THEN
        RAISE EXCEPTION 'fleet_ship_batch: the events must be seqs % to % without a hole',
            st.last_seq + 1, st.last_seq + l_n USING ERRCODE = 'PS001';
    END IF;
    IF l_bad IS NOT NULL THEN
        RETURN QUERY SELECT CAST(0 AS bigint), fleet_ship_refuse(p_store_id, format(
            'refused: store %s diverged: the hash of seq %s does not cover its content and '
            'the chain before it (the node''s history was edited after it was written); '
            'nothing was written', p_store_id, l_bad));
        RETURN;
    END IF;
    IF l_expect IS NULL THEN
        -- History shipped before the chain: this batch anchors it, on the node's word.
        INSERT INTO fleet_chain_links (store_id, seq, prev_hash, reason)
        VALUES (p_store_id, st.last_seq + 1, p_prev, 'adopted');
        INSERT INTO fleet_store_log (store_id, action, detail)
        VALUES (p_store_id, 'adopted', format(
            'events up to seq %s were shipped before the hash chain; the chain continues from '
            '%s, as the node sent it', st.last_seq, encode(p_prev, 'hex')));
    END IF;
    IF l_n = 0 THEN
        UPDATE fleet_stores SET last_shipped_at = now(), head_hash = p_prev
        WHERE store_id = p_store_id;
        RETURN QUERY SELECT CAST(0 AS bigint), CAST(NULL AS text);
        RETURN;
    END IF;
    -- The events, and the current state moved past them: each entry (and registered
    -- resource) takes the state of its last event in the batch. Every part is a
    -- data-modifying CTE of one statement; they all see the state from before it, so two
    -- parts never touch the same row (device rows carry the seq of the event that wrote
    -- them: the old version's rows are deleted, the new version's inserted under another key).
    WITH u AS (
        SELECT r.seq, r.ts, r.op, r.pod_uid, r.container, r.resource, r.device_ids,
               r.released, r.hash, CAST(r.device_ids AS jsonb) AS dj
        FROM unnest(l_rows) r
    ),
    inserted AS (
        INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource,
                                  device_ids, devices, device_ids_text, released, hash)
        SELECT p_store_id, u.seq, u.ts, u.op, u.pod_uid, u.container, u.resource, u.dj,
               -- fleet_event_devices, written out: a SQL function with a subquery is not
               -- inlined, and called per event it cost more than the rest of the insert.
               CASE WHEN u.op IN (@DEVICE_OPS@) THEN
                   ARRAY(SELECT jsonb_array_elements_text(
                             jsonb_path_query_array(u.dj, fleet_device_path(u.pod_uid))))
               ELSE CAST(ARRAY[] AS text[]) END,
               u.device_ids, u.released, u.hash
        FROM u
    ),
    -- Each entry the batch touches, in the state of its last event in the batch (seq NULL:
    -- deleted), with the seq of the state the fleet held for it (old_seq NULL: none).
    touched AS (
        SELECT t.pod_uid, t.container, t.resource, t.seq, t.device_ids, e.seq AS old_seq
        FROM (SELECT DISTINCT ON (u.pod_uid, u.container, u.resource)
                     u.pod_uid, u.container, u.resource,
                     CASE WHEN u.op = 'delete' THEN NULL ELSE u.seq END AS seq,
                     CASE WHEN u.op = 'delete' THEN NULL ELSE u.dj END AS device_ids
              FROM u WHERE u.pod_uid IS NOT NULL AND u.op IN (@ENTRY_OPS@)
              ORDER BY u.pod_uid, u.container, u.resource, u.seq DESC) t
        LEFT JOIN fleet_entries e
          ON e.store_id = p_store_id AND e.pod_uid = t.pod_uid
         AND e.container = t.container AND e.resource = t.resource
    ),
    released AS (
        DELETE FROM fleet_allocations a USING touched t
        WHERE t.old_seq IS NOT NULL AND a.store_id = p_store_id AND a.pod_uid = t.pod_uid
          AND a.container = t.container AND a.resource = t.resource
        RETURNING 1
    ),
    removed AS (
        DELETE FROM fleet_entries e USING touched t
        WHERE t.seq IS NULL AND t.old_seq IS NOT NULL AND e.store_id = p_store_id
          AND e.pod_uid = t.pod_uid AND e.container = t.container AND e.resource = t.resource
    ),
    changed AS (
        UPDATE fleet_entries e SET device_ids = t.device_ids, seq = t.seq
        FROM touched t
        WHERE t.seq IS NOT NULL AND t.old_seq IS NOT NULL AND e.store_id = p_store_id
          AND e.pod_uid = t.pod_uid AND e.container = t.container AND e.resource = t.resource
    ),
    added AS (
        INSERT INTO fleet_entries (store_id, pod_uid, container, resource, device_ids, seq)
        SELECT p_store_id, t.pod_uid, t.container, t.resource, t.device_ids, t.seq
        FROM touched t WHERE t.seq IS NOT NULL AND t.old_seq IS NULL
    ),
    held AS (
        INSERT INTO fleet_allocations (store_id, pod_uid, container, resource, seq,
                                       numa_node, position, device_id)
        SELECT p_store_id, t.pod_uid, t.container, t.resource, t.seq, CAST(n.key AS bigint),
               CAST(d.ord AS integer) - 1, d.device_id
        FROM touched t
        CROSS JOIN LATERAL jsonb_each(
            CASE WHEN jsonb_typeof(t.device_ids) = 'object' THEN t.device_ids END) AS n
        CROSS JOIN LATERAL jsonb_array_elements_text(
            CASE WHEN jsonb_typeof(n.value) = 'array' THEN n.value END)
            WITH ORDINALITY AS d (device_id, ord)
        WHERE t.seq IS NOT NULL
        RETURNING resource, device_id, pod_uid
    ),
    -- Double allocations: recount the devices the batch gave to an entry and those listed
    -- already (a device only becomes one by being given, only stops by being listed). Their
    -- holders are the new rows and the old rows of entries the batch did not touch.
    affected AS (
        SELECT h.resource, h.device_id FROM held h
        UNION
        SELECT d.resource, d.device_id FROM fleet_double_allocated d
        WHERE d.store_id = p_store_id
    ),
    holders AS (
        SELECT h.resource, h.device_id, h.pod_uid FROM held h
        UNION
        SELECT a.resource, a.device_id, a.pod_uid
        FROM affected f
        JOIN fleet_allocations a
          ON a.store_id = p_store_id AND a.resource = f.resource AND a.device_id = f.device_id
        WHERE NOT EXISTS (SELECT 1 FROM touched t
                          WHERE t.pod_uid = a.pod_uid AND t.container = a.container
                            AND t.resource = a.resource)
    ),
    counted AS (
        SELECT h.resource, h.device_id, count(*) AS pod_count FROM holders h
        GROUP BY h.resource, h.device_id
    ),
    undoubled AS (
        DELETE FROM fleet_double_allocated d USING affected f
        WHERE d.store_id = p_store_id AND d.resource = f.resource
          AND d.device_id = f.device_id
          AND NOT EXISTS (SELECT 1 FROM counted c
                          WHERE c.resource = d.resource AND c.device_id = d.device_id
                            AND c.pod_count > 1)
    ),
    doubled AS (
        INSERT INTO fleet_double_allocated (store_id, resource, device_id, pod_count)
        SELECT p_store_id, c.resource, c.device_id, c.pod_count FROM counted c
        WHERE c.pod_count > 1
        ON CONFLICT (store_id, resource, device_id)
        DO UPDATE SET pod_count = EXCLUDED.pod_count
    ),
    regs AS (
        SELECT DISTINCT ON (u.resource) u.resource, u.op, u.dj
        FROM u WHERE u.pod_uid IS NULL AND u.op IN ('registered', 'unregistered')
        ORDER BY u.resource, u.seq DESC
    ),
    unregistered AS (
        DELETE FROM fleet_registered r USING regs g
        WHERE r.store_id = p_store_id AND r.resource = g.resource AND g.op = 'unregistered'
    ),
    registered AS (
        INSERT INTO fleet_registered (store_id, resource, device_ids)
        SELECT p_store_id, g.resource, g.dj FROM regs g WHERE g.op <> 'unregistered'
        ON CONFLICT (store_id, resource) DO UPDATE SET device_ids = EXCLUDED.device_ids
    )
    UPDATE fleet_stores
    SET last_seq = st.last_seq + l_n, head_hash = (l_rows[l_n]).hash, last_shipped_at = now(),
        events = events + l_n,
        entries = entries
                  + (SELECT count(*) FILTER (WHERE t.seq IS NOT NULL AND t.old_seq IS NULL)
                            - count(*) FILTER (WHERE t.seq IS NULL AND t.old_seq IS NOT NULL)
                     FROM touched t),
        device_rows = device_rows + (SELECT count(*) FROM held)
                      - (SELECT count(*) FROM released)
    WHERE store_id = p_store_id;
    RETURN QUERY SELECT l_n, CAST(NULL AS text);
END
$fn$
""",
    # History the node pruned before it was shipped: the node's whole current state at
    # p_at_seq (its newest seq) replaces the store's central state; the events it kept in the
    # gap are stored as history (their hashes checked run by run: a run's first event chains
    # from the event before it, the fleet's head, or the link the node recorded when it
    # pruned that event's predecessor); the store's chain continues from p_head, the node's
    # chain value at p_at_seq, recorded as the snapshot's anchor.
    f"""
CREATE FUNCTION fleet_ship_snapshot(
    p_store_id uuid, p_node text, p_at_seq bigint, p_ts timestamptz, p_head bytea,
    p_entries json, p_registered json, p_kept jsonb, p_kept_hashes bytea, p_links json)
RETURNS TABLE (shipped bigint, missing bigint, refused text)
LANGUAGE plpgsql SECURITY DEFINER {_SETTINGS}
AS $fn$
DECLARE
    st fleet_stores;
    l_reason text;
    l_expect bytea;
    l_kept fleet_event_in[];
    l_n bigint;
    l_bad bigint;
    l_ts timestamptz;
    l_entries bigint;
    l_registered bigint;
    l_rows bigint;
BEGIN
    st := fleet_ship_lock(p_store_id, p_node);
    l_reason := fleet_ship_check(st, p_node);
    IF l_reason IS NOT NULL THEN
        RETURN QUERY SELECT CAST(0 AS bigint), CAST(0 AS bigint), l_reason;
        RETURN;
    END IF;
    IF p_head IS NULL OR length(p_head) <> 32 OR p_at_seq IS NULL OR p_ts IS NULL THEN
        RAISE EXCEPTION 'fleet_ship_snapshot: the snapshot''s seq, time and chain value '
            '(32 bytes) are needed' USING ERRCODE = 'PS001';
    END IF;
    IF p_at_seq < st.last_seq THEN
        RETURN QUERY SELECT CAST(0 AS bigint), CAST(0 AS bigint), fleet_ship_refuse(
            p_store_id, format(
            'refused: store %s diverged from the fleet''s copy: its history ends at seq %s, '
            'but the fleet holds it up to seq %s (an older copy of the store file, or another '
            'store under this identity); nothing was written',
            p_store_id, p_at_seq, st.last_seq));
        RETURN;
    END IF;
    IF p_at_seq = st.last_seq THEN
        RAISE EXCEPTION 'fleet_ship_snapshot: the fleet already holds seq %', p_at_seq
            USING ERRCODE = 'PS001';
    END IF;
    l_kept := ARRAY(SELECT k FROM fleet_events_in(p_kept, p_kept_hashes) k ORDER BY k.seq);
    l_n := cardinality(l_kept);
    IF l_n > 0 AND ((l_kept[1]).seq <= st.last_seq OR (l_kept[l_n]).seq > p_at_seq
                    OR (SELECT count(DISTINCT r.seq) FROM unnest(l_kept) r) <> l_n) THEN
        RAISE EXCEPTION 'fleet_ship_snapshot: kept events must be distinct seqs after % up '
            'to %', st.last_seq, p_at_seq USING ERRCODE = 'PS001';
    END IF;
    IF l_n > 0 AND (l_kept[l_n]).seq = p_at_seq AND (l_kept[l_n]).hash <> p_head THEN
        RAISE EXCEPTION 'fleet_ship_snapshot: the chain value at seq % is not that event''s '
            'hash', p_at_seq USING ERRCODE = 'PS001';
    END IF;
    l_expect := fleet_chain_expected(st);
    SELECT min(c.seq) INTO l_bad
    FROM (SELECT k.seq, k.hash,
                 sha256(CASE WHEN lag(k.seq) OVER w = k.seq - 1 THEN lag(k.hash) OVER w
                             WHEN k.seq = st.last_seq + 1 AND l_expect IS NOT NULL
                                 THEN l_expect
                             ELSE decode(l.prev, 'hex') END
                        || fleet_event_canonical(k.seq, k.ts, k.op, k.pod_uid, k.container,
                                                 k.resource, k.device_ids, k.released))
                     AS expect
          FROM unnest(l_kept) k
          LEFT JOIN json_to_recordset(p_links) AS l (seq bigint, prev text) ON l.seq = k.seq
          WINDOW w AS (ORDER BY k.seq)) c
    WHERE c.expect IS NULL OR c.hash IS DISTINCT FROM c.expect;
    IF l_bad IS NOT NULL THEN
        RETURN QUERY SELECT CAST(0 AS bigint), CAST(0 AS bigint), fleet_ship_refuse(
            p_store_id, format(
            'refused: store %s diverged: the hash of seq %s does not continue the chain '
            '(the fleet''s head, the event before it, or the link the node recorded when it '
            'pruned its predecessor); nothing was written', p_store_id, l_bad));
        RETURN;
    END IF;

    -- Links: where a kept run starts after an event the fleet does not hold, and where the
    -- store continues after the snapshot when its newest event is not kept.
    INSERT INTO fleet_chain_links (store_id, seq, prev_hash, reason)
    SELECT p_store_id, k.seq, decode(l.prev, 'hex'),
           CASE WHEN k.seq = st.last_seq + 1 THEN 'adopted' ELSE 'pruned' END
    FROM (SELECT k.seq, lag(k.seq) OVER (ORDER BY k.seq) AS before FROM unnest(l_kept) k) k
    JOIN json_to_recordset(p_links) AS l (seq bigint, prev text) ON l.seq = k.seq
    WHERE k.before IS DISTINCT FROM k.seq - 1
      AND NOT (k.seq = st.last_seq + 1 AND l_expect IS NOT NULL);
    IF l_n = 0 OR (l_kept[l_n]).seq <> p_at_seq THEN
        INSERT INTO fleet_chain_links (store_id, seq, prev_hash, reason)
        VALUES (p_store_id, p_at_seq + 1, p_head, 'snapshot');
    END IF;

    -- The kept events: history only (the snapshot is their state).
    INSERT INTO fleet_events (store_id, seq, ts, op, pod_uid, container, resource,
                              device_ids, devices, device_ids_text, released, hash)
    SELECT p_store_id, k.seq, k.ts, k.op, k.pod_uid, k.container, k.resource,
           CAST(k.device_ids AS jsonb),
           CASE WHEN k.op IN (@DEVICE_OPS@)
                THEN fleet_event_devices(k.pod_uid, CAST(k.device_ids AS jsonb))
                ELSE CAST(ARRAY[] AS text[]) END,
           k.device_ids, k.released, k.hash
    FROM unnest(l_kept) k;

    -- The state, replaced whole.
    DELETE FROM fleet_double_allocated WHERE store_id = p_store_id;
    DELETE FROM fleet_allocations WHERE store_id = p_store_id;
    DELETE FROM fleet_entries WHERE store_id = p_store_id;
    DELETE FROM fleet_registered WHERE store_id = p_store_id;
    INSERT INTO fleet_entries (store_id, pod_uid, container, resource, device_ids, seq)
    SELECT p_store_id, e.pod_uid, e.container, e.resource, CAST(e.device_ids AS jsonb),
           p_at_seq
    FROM json_to_recordset(p_entries)
         AS e (pod_uid text, container text, resource text, device_ids text);
    GET DIAGNOSTICS l_entries = ROW_COUNT;
    INSERT INTO fleet_allocations (store_id, pod_uid, container, resource, seq, numa_node,
                                   position, device_id)
    SELECT p_store_id, e.pod_uid, e.container, e.resource, p_at_seq, CAST(n.key AS bigint),
           CAST(d.ord AS integer) - 1, d.device_id
    FROM fleet_entries e
    CROSS JOIN LATERAL jsonb_each(
        CASE WHEN jsonb_typeof(e.device_ids) = 'object' THEN e.device_ids END) AS n
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(n.value) = 'array' THEN n.value END)
        WITH ORDINALITY AS d (device_id, ord)
    WHERE e.store_id = p_store_id;
    GET DIAGNOSTICS l_rows = ROW_COUNT;
    INSERT INTO fleet_double_allocated (store_id, resource, device_id, pod_count)
    SELECT p_store_id, a.resource, a.device_id, count(DISTINCT a.pod_uid)
    FROM fleet_allocations a WHERE a.store_id = p_store_id
    GROUP BY a.resource, a.device_id HAVING count(DISTINCT a.pod_uid) > 1;
    INSERT INTO fleet_registered (store_id, resource, device_ids)
    SELECT p_store_id, r.resource, CAST(r.device_ids AS jsonb)
    FROM json_to_recordset(p_registered) AS r (resource text, device_ids text);
    GET DIAGNOSTICS l_registered = ROW_COUNT;

    -- Stamped when it was taken, and never before what the fleet already holds of the
    -- store (its events up to p_at_seq, an earlier snapshot): owners at an instant then read
    -- each fact from the newest record that had it.
    SELECT greatest(p_ts,
                    (SELECT e.ts FROM fleet_events e
                     WHERE e.store_id = p_store_id AND e.seq <= p_at_seq
                     ORDER BY e.seq DESC LIMIT 1),
                    (SELECT max(s.ts) FROM fleet_snapshots s WHERE s.store_id = p_store_id))
    INTO l_ts;
    INSERT INTO fleet_snapshots (store_id, at_seq, after_seq, missing_events, entries,
                                 registered, ts, anchor_hash)
    VALUES (p_store_id, p_at_seq, st.last_seq, p_at_seq - st.last_seq - l_n, l_entries,
            l_registered, l_ts, p_head);
    INSERT INTO fleet_snapshot_devices (store_id, at_seq, pod_uid, container, resource,
                                        device_id)
    SELECT DISTINCT a.store_id, p_at_seq, a.pod_uid, a.container, a.resource, a.device_id
    FROM fleet_allocations a WHERE a.store_id = p_store_id;
    UPDATE fleet_stores
    SET last_seq = p_at_seq, head_hash = p_head, last_shipped_at = now(),
        events = events + l_n, entries = l_entries, device_rows = l_rows,
        snapshots = snapshots + 1
    WHERE store_id = p_store_id;
    RETURN QUERY SELECT l_n, p_at_seq - st.last_seq - l_n, CAST(NULL AS text);
END
$fn$
""",
)

# Functions that write (or lock) run only inside the three entry points; nobody gets EXECUTE on
# them, and the entry points are granted per node role by `fleet grant-node`.
_PATH_NAMES = (
    "fleet_ship_snapshot(uuid, text, bigint, timestamptz, bytea, json, json, jsonb, bytea, json)",
    "fleet_ship_batch(uuid, text, bigint, bytea, jsonb, bytea)",
    "fleet_ship_open(uuid, text)",
    "fleet_chain_expected(fleet_stores)",
    "fleet_ship_check(fleet_stores, text)",
    "fleet_ship_refuse(uuid, text)",
    "fleet_ship_lock(uuid, text)",
    "fleet_may_ship(text)",
)

# ---- views: current state leaves retired stores out -----------------------------------------

_VIEWS = (
    (
        "v_fleet_allocations",
        """
CREATE VIEW v_fleet_allocations AS
SELECT s.node AS node, a.store_id AS store_id, a.pod_uid AS pod_uid,
       a.container AS container, a.resource AS resource, a.numa_node AS numa_node,
       a.device_id AS device_id
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
WHERE s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_device_owners",
        """
CREATE VIEW v_fleet_device_owners AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
WHERE s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_double_allocations",
        """
CREATE VIEW v_fleet_double_allocations AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       d.pod_count AS pod_count
FROM fleet_double_allocated d
JOIN fleet_allocations a
  ON a.store_id = d.store_id AND a.resource = d.resource AND a.device_id = d.device_id
JOIN fleet_stores s ON s.store_id = d.store_id
WHERE s.retired_at IS NULL
""",
    ),
)

# f0001's views, put back by the downgrade.
_F0001_VIEWS = tuple(
    (name, create.replace("WHERE s.retired_at IS NULL\n", "")) for name, create in _VIEWS
)

_COUNTERS = ("events", "entries", "device_rows", "snapshots", "refusals")


def _execute(sql: str) -> None:
    # Straight to the driver: function bodies hold colons and percent signs that neither
    # SQLAlchemy's text() nor psycopg's parameter syntax may interpret.
    op.get_bind().exec_driver_sql(sql, execution_options={"no_parameters": True})


def _schema() -> str:
    name = str(op.get_bind().exec_driver_sql("SELECT current_schema()").scalar_one())
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    op.add_column("fleet_stores", sa.Column("head_hash", sa.LargeBinary(), nullable=True))
    for counter in _COUNTERS:
        op.add_column(
            "fleet_stores",
            sa.Column(counter, sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        )
    op.add_column("fleet_stores", sa.Column("last_refusal", sa.Text(), nullable=True))
    op.add_column(
        "fleet_stores", sa.Column("last_refusal_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "fleet_stores", sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("fleet_events", sa.Column("device_ids_text", sa.Text(), nullable=True))
    op.add_column("fleet_events", sa.Column("released", sa.Text(), nullable=True))
    op.add_column("fleet_events", sa.Column("hash", sa.LargeBinary(), nullable=True))
    op.add_column("fleet_snapshots", sa.Column("anchor_hash", sa.LargeBinary(), nullable=True))
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint(
        "ck_fleet_events_op", "fleet_events", f"op IN ({_DEVICE_OPS}, {_NODE_OPS})"
    )
    # The counters of the stores shipped so far, counted once here.
    op.execute(
        """
        UPDATE fleet_stores s SET
            events = (SELECT count(*) FROM fleet_events e WHERE e.store_id = s.store_id),
            entries = (SELECT count(*) FROM fleet_entries e WHERE e.store_id = s.store_id),
            device_rows = (SELECT count(*) FROM fleet_allocations a
                           WHERE a.store_id = s.store_id),
            snapshots = (SELECT count(*) FROM fleet_snapshots p WHERE p.store_id = s.store_id)
        """
    )
    op.create_table(
        "fleet_chain_links",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("prev_hash", sa.LargeBinary(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("store_id", "seq", name="pk_fleet_chain_links"),
        sa.CheckConstraint(
            "reason IN ('adopted', 'pruned', 'snapshot')", name="ck_fleet_chain_links_reason"
        ),
    )
    op.create_table(
        "fleet_store_log",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column(
            "logged_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("by_role", sa.Text(), server_default=sa.text("session_user"), nullable=False),
        sa.PrimaryKeyConstraint("store_id", "id", name="pk_fleet_store_log"),
    )
    op.create_table(
        "fleet_node_grants",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("role_name", sa.Text(), nullable=False),
        sa.Column(
            "granted_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("node", "role_name", name="pk_fleet_node_grants"),
    )
    schema = _schema()
    for create in _PURE:
        _execute(create)
    _execute(_EVENT_IN)
    _execute(_EVENTS_IN)
    for create in _PATH:
        _execute(
            create.replace("@SCHEMA@", schema)
            .replace("@DEVICE_OPS@", _DEVICE_OPS)
            .replace("@ENTRY_OPS@", _ENTRY_OPS)
        )
    for name in _PATH_NAMES:
        _execute(f"REVOKE EXECUTE ON FUNCTION {name} FROM PUBLIC")
    for _name, create in _VIEWS:
        op.execute(create)


def downgrade() -> None:
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    for name in _PATH_NAMES:
        _execute(f"DROP FUNCTION {name}")
    _execute(f"DROP FUNCTION {_EVENTS_IN_NAME}")
    _execute("DROP TYPE fleet_event_in")
    for name in _PURE_NAMES:
        _execute(f"DROP FUNCTION {name}")
    for table in ("fleet_node_grants", "fleet_store_log", "fleet_chain_links"):
        op.drop_table(table)
    op.drop_column("fleet_snapshots", "anchor_hash")
    # f0001 knew device events only: the node's other events go (they were history only).
    op.execute(f"DELETE FROM fleet_events WHERE op IN ({_NODE_OPS})")
    op.drop_constraint("ck_fleet_events_op", "fleet_events", type_="check")
    op.create_check_constraint("ck_fleet_events_op", "fleet_events", f"op IN ({_DEVICE_OPS})")
    for column in ("hash", "released", "device_ids_text"):
        op.drop_column("fleet_events", column)
    for column in ("retired_at", "last_refusal_at", "last_refusal", *_COUNTERS, "head_hash"):
        op.drop_column("fleet_stores", column)
    for _name, create in _F0001_VIEWS:
        op.execute(create)
