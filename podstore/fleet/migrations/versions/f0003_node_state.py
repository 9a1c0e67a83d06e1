"""Round 3, the whole node: the fleet keeps the node's CPU, memory and DRA items, its topology
and its pod names as current state, and lists DRA devices in the history.

Revision ID: f0003
Revises: f0002
Create Date: 2026-12-05

- ``fleet_node_items``: one row per item the node's ``cpu-``, ``memory-``, ``dra-`` and
  ``node-`` events describe (key ``(pod_uid, container, resource)`` as the events carry it,
  ``value`` the payload of its latest event, ``devices`` a DRA claim's ``driver/pool/device``),
  kept by the shipping functions in the transaction of the events, like the device state.
- ``fleet_ship_batch`` is replaced (same signature, so the EXECUTE grants of ``fleet
  grant-node`` stay): a batch holding node events moves ``fleet_node_items`` to the state of
  each key's last event in it; a batch of device events only pays one more aggregate over the
  batch. DRA events list their devices in ``fleet_events.devices`` (``fleet owners --at``).
- ``fleet_ship_snapshot`` takes the node's items as well (``p_node_items``) and replaces them
  whole with the rest of the state. Its signature changes, so the roles that could execute the
  old one are granted the new one here (and back on downgrade); EXECUTE is revoked from
  PUBLIC, as f0002 does.
- Upgrade on a filled database: the DRA events already held get their devices, and
  ``fleet_node_items`` is rebuilt from each key's latest event held (a store whose history the
  node pruned before it was shipped keeps what its newest held events say).
- Views: ``v_fleet_pod_names``, ``v_fleet_dra_devices``, ``v_fleet_container_numa``,
  ``v_fleet_numa_misaligned``; ``v_fleet_device_owners`` gains ``namespace`` and
  ``pod_name``.

The functions are f0002's frozen text with this revision's additions spliced in (each splice
point checked to be there once), so that what f0002 means never changes; views are frozen
text here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from podstore.fleet.migrations.versions import f0002_trust as f0002

revision: str = "f0003"
down_revision: str | None = "f0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NODE_OPS = f0002._NODE_OPS
_DRA_OPS = "'dra-set', 'dra-delete'"

# The key of an item as one text value (pod_uid and container may be NULL): written the same
# way by the shipping functions, the upgrade's rebuild and the views that look an item up.
_KEY = "CAST(jsonb_build_array({p}, {c}, {r}) AS text)"


def _key(p: str, c: str, r: str) -> str:
    return _KEY.format(p=p, c=c, r=r)


# ---- pure: the devices a DRA claim's payload names (the node's codec.named_devices) --------

_DRA_DEVICES = """
CREATE FUNCTION fleet_dra_devices(v jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(
    SELECT DISTINCT d.key || '/' || (x ->> 'pool') || '/' || (x ->> 'device')
    FROM jsonb_each(CASE WHEN jsonb_typeof(v -> 'drivers') = 'object'
                         THEN v -> 'drivers' END) AS d
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(d.value) = 'array' THEN d.value END) AS x
    ORDER BY 1)
"""
_DRA_DEVICES_NAME = "fleet_dra_devices(jsonb)"

# ---- the shipping path: f0002's functions with the node items spliced in ------------------


def _f0002_function(name: str) -> str:
    (text,) = [t for t in f0002._PATH if f"CREATE FUNCTION {name}(" in t]
    return text


def _splice(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError(f"f0003: splice point not found once in f0002's text: {old!r}")
    return text.replace(old, new)


_DEVICES_ELSE = "ELSE CAST(ARRAY[] AS text[]) END,"
_DRA_DEVICES_CASE = (
    f"WHEN {{op}} IN ({_DRA_OPS}) THEN fleet_dra_devices({{dj}})\n"
    "               ELSE CAST(ARRAY[] AS text[]) END,"
)


def _batch() -> str:
    text = _f0002_function("fleet_ship_batch")
    text = text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    text = _splice(
        text, "    l_misplaced boolean;\n", "    l_misplaced boolean;\n    l_node boolean;\n"
    )
    # Whether the batch holds node events at all, in the pass that already reads it: a batch
    # of device events does no more than that.
    text = _splice(
        text,
        "           bool_or(c.seq IS DISTINCT FROM st.last_seq + c.pos)\n"
        "    INTO l_rows, l_bad, l_misplaced\n",
        "           bool_or(c.seq IS DISTINCT FROM st.last_seq + c.pos),\n"
        f"           bool_or(c.op IN ({_NODE_OPS}))\n"
        "    INTO l_rows, l_bad, l_misplaced, l_node\n",
    )
    text = _splice(text, _DEVICES_ELSE, _DRA_DEVICES_CASE.format(op="u.op", dj="u.dj"))
    # Each item the batch touches takes the state of its last event in the batch: deleted, or
    # written with that event's payload (DISTINCT ON groups NULL keys together, as the node's
    # key does).
    text = _splice(
        text,
        "    RETURN QUERY SELECT l_n, CAST(NULL AS text);\nEND",
        f"""    IF l_node THEN
        WITH last AS (
            SELECT DISTINCT ON (r.pod_uid, r.container, r.resource)
                   r.seq, r.op, r.pod_uid, r.container, r.resource,
                   CAST(r.device_ids AS jsonb) AS value,
                   {_key("r.pod_uid", "r.container", "r.resource")} AS item_key
            FROM unnest(l_rows) r WHERE r.op IN ({_NODE_OPS})
            ORDER BY r.pod_uid, r.container, r.resource, r.seq DESC
        ),
        gone AS (
            DELETE FROM fleet_node_items i USING last l
            WHERE l.op LIKE '%-delete' AND i.store_id = p_store_id
              AND i.item_key = l.item_key
        )
        INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource,
                                      value, devices, seq)
        SELECT p_store_id, l.item_key, split_part(l.op, '-', 1), l.pod_uid, l.container,
               l.resource, l.value,
               CASE WHEN l.op = 'dra-set' THEN fleet_dra_devices(l.value)
                    ELSE CAST(ARRAY[] AS text[]) END,
               l.seq
        FROM last l WHERE l.op LIKE '%-set'
        ON CONFLICT (store_id, item_key) DO UPDATE
        SET kind = EXCLUDED.kind, value = EXCLUDED.value, devices = EXCLUDED.devices,
            seq = EXCLUDED.seq;
    END IF;
    RETURN QUERY SELECT l_n, CAST(NULL AS text);
END""",
    )
    return text


_SNAPSHOT_ARGS = "p_kept jsonb, p_kept_hashes bytea, p_links json)"
_SNAPSHOT_OLD = f0002._PATH_NAMES[0]
_SNAPSHOT_NEW = _SNAPSHOT_OLD.replace("jsonb, bytea, json)", "jsonb, bytea, json, json)")


def _snapshot() -> str:
    text = _f0002_function("fleet_ship_snapshot")
    text = _splice(
        text,
        _SNAPSHOT_ARGS,
        "p_kept jsonb, p_kept_hashes bytea, p_links json,\n    p_node_items json)",
    )
    text = _splice(
        text, _DEVICES_ELSE, _DRA_DEVICES_CASE.format(op="k.op", dj="CAST(k.device_ids AS jsonb)")
    )
    # The node's items at p_at_seq, replaced whole with the rest of the state.
    text = _splice(
        text,
        "    GET DIAGNOSTICS l_registered = ROW_COUNT;\n",
        f"""    GET DIAGNOSTICS l_registered = ROW_COUNT;
    DELETE FROM fleet_node_items WHERE store_id = p_store_id;
    INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource,
                                  value, devices, seq)
    SELECT p_store_id, {_key("n.pod_uid", "n.container", "n.resource")}, n.kind, n.pod_uid,
           n.container, n.resource, CAST(n.value AS jsonb),
           CASE WHEN n.kind = 'dra' THEN fleet_dra_devices(CAST(n.value AS jsonb))
                ELSE CAST(ARRAY[] AS text[]) END,
           p_at_seq
    FROM json_to_recordset(p_node_items)
         AS n (kind text, pod_uid text, container text, resource text, value text);
""",
    )
    return text


def _render(text: str, schema: str) -> str:
    return (
        text.replace("@SCHEMA@", schema)
        .replace("@DEVICE_OPS@", f0002._DEVICE_OPS)
        .replace("@ENTRY_OPS@", f0002._ENTRY_OPS)
    )


# ---- views ----------------------------------------------------------------------------------

_VIEWS = (
    (
        "v_fleet_device_owners",
        """
CREATE VIEW v_fleet_device_owners AS
SELECT DISTINCT s.node AS node, a.store_id AS store_id, a.resource AS resource,
       a.device_id AS device_id, a.pod_uid AS pod_uid, a.container AS container,
       n.value ->> 'namespace' AS namespace, n.value ->> 'name' AS pod_name
FROM fleet_allocations a
JOIN fleet_stores s ON s.store_id = a.store_id
LEFT JOIN fleet_node_items n
  ON n.store_id = a.store_id
 AND n.item_key = CAST(jsonb_build_array(a.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_pod_names",
        """
CREATE VIEW v_fleet_pod_names AS
SELECT s.node AS node, i.store_id AS store_id, i.pod_uid AS pod_uid,
       i.value ->> 'namespace' AS namespace, i.value ->> 'name' AS name
FROM fleet_node_items i
JOIN fleet_stores s ON s.store_id = i.store_id
WHERE i.kind = 'node' AND i.resource = 'pod-name' AND s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_dra_devices",
        """
CREATE VIEW v_fleet_dra_devices AS
SELECT s.node AS node, i.store_id AS store_id, substr(i.resource, 5) AS claim_uid,
       i.value ->> 'namespace' AS namespace, i.value ->> 'name' AS claim_name,
       p.pod_uid AS pod_uid, d.key AS driver, x.value ->> 'pool' AS pool,
       x.value ->> 'device' AS device, x.value ->> 'shareID' AS share_id,
       nullif(x.value -> 'requests', CAST('null' AS jsonb)) AS request_names,
       nullif(x.value -> 'cdi', CAST('null' AS jsonb)) AS cdi_device_ids
FROM fleet_node_items i
JOIN fleet_stores s ON s.store_id = i.store_id
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(i.value -> 'drivers') = 'object' THEN i.value -> 'drivers' END) AS d
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(d.value) = 'array' THEN d.value END) AS x
LEFT JOIN LATERAL jsonb_array_elements_text(
    CASE WHEN jsonb_typeof(i.value -> 'pods') = 'array' THEN i.value -> 'pods' END)
    AS p (pod_uid) ON true
WHERE i.kind = 'dra' AND s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_container_numa",
        """
CREATE VIEW v_fleet_container_numa AS
WITH
topo (store_id, cpu, numa_node) AS (
    SELECT t.store_id, CAST(c.cpu AS bigint), CAST(substr(t.resource, 6) AS bigint)
    FROM fleet_node_items t
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(t.value) = 'array' THEN t.value END) AS c (cpu)
    WHERE t.kind = 'node' AND t.resource LIKE 'numa:%'
),
dev (store_id, pod_uid, container, nodes) AS (
    SELECT a.store_id, a.pod_uid, a.container,
           jsonb_agg(DISTINCT a.numa_node ORDER BY a.numa_node)
    FROM fleet_allocations a WHERE a.numa_node >= 0
    GROUP BY a.store_id, a.pod_uid, a.container
),
cpu (store_id, pod_uid, container, nodes) AS (
    SELECT i.store_id, i.pod_uid, i.container,
           jsonb_agg(DISTINCT t.numa_node ORDER BY t.numa_node)
    FROM fleet_node_items i
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS c (cpu)
    JOIN topo t ON t.store_id = i.store_id AND t.cpu = CAST(c.cpu AS bigint)
    WHERE i.kind = 'cpu' AND i.resource = 'cpu' AND i.pod_uid IS NOT NULL
      AND i.container IS NOT NULL
    GROUP BY i.store_id, i.pod_uid, i.container
),
mem (store_id, pod_uid, container, nodes) AS (
    SELECT i.store_id, i.pod_uid, i.container,
           jsonb_agg(DISTINCT CAST(n.numa_node AS bigint) ORDER BY CAST(n.numa_node AS bigint))
    FROM fleet_node_items i
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(i.value) = 'array' THEN i.value END) AS b
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE WHEN jsonb_typeof(b.value -> 'numaAffinity') = 'array'
             THEN b.value -> 'numaAffinity' END) AS n (numa_node)
    WHERE i.kind = 'memory' AND i.resource = 'memory' AND i.container IS NOT NULL
    GROUP BY i.store_id, i.pod_uid, i.container
),
keys (store_id, pod_uid, container) AS (
    SELECT store_id, pod_uid, container FROM fleet_allocations
    UNION
    SELECT store_id, pod_uid, container FROM fleet_node_items
    WHERE kind = 'cpu' AND resource = 'cpu' AND pod_uid IS NOT NULL AND container IS NOT NULL
    UNION
    SELECT store_id, pod_uid, container FROM fleet_node_items
    WHERE kind = 'memory' AND resource = 'memory' AND container IS NOT NULL
),
sets (store_id, pod_uid, container, device_numa, cpu_numa, memory_numa) AS (
    SELECT k.store_id, k.pod_uid, k.container, d.nodes, c.nodes, m.nodes
    FROM keys k
    LEFT JOIN dev d
      ON d.store_id = k.store_id AND d.pod_uid = k.pod_uid AND d.container = k.container
    LEFT JOIN cpu c
      ON c.store_id = k.store_id AND c.pod_uid = k.pod_uid AND c.container = k.container
    LEFT JOIN mem m
      ON m.store_id = k.store_id AND m.pod_uid = k.pod_uid AND m.container = k.container
)
SELECT s.node AS node, x.store_id AS store_id, x.pod_uid AS pod_uid,
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
FROM sets x
JOIN fleet_stores s ON s.store_id = x.store_id
LEFT JOIN fleet_node_items n
  ON n.store_id = x.store_id
 AND n.item_key = CAST(jsonb_build_array(x.pod_uid, CAST(NULL AS text), 'pod-name') AS text)
WHERE s.retired_at IS NULL
""",
    ),
    (
        "v_fleet_numa_misaligned",
        """
CREATE VIEW v_fleet_numa_misaligned AS
SELECT node, store_id, pod_uid, namespace, pod_name, container, device_numa, cpu_numa,
       memory_numa, aligned
FROM v_fleet_container_numa
WHERE aligned = 0
""",
    ),
)
_F0002_DEVICE_OWNERS = dict(f0002._VIEWS)["v_fleet_device_owners"]


def _execute(sql: str) -> None:
    # Straight to the driver: function bodies hold colons and percent signs.
    op.get_bind().exec_driver_sql(sql, execution_options={"no_parameters": True})


def _grantees(signature: str) -> list[str]:
    """The roles other than the owner holding EXECUTE on a function (the node roles)."""
    found = op.get_bind().exec_driver_sql(
        "SELECT DISTINCT r.rolname FROM pg_proc p "
        "CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee "
        f"WHERE p.oid = CAST('{signature}' AS regprocedure) AND a.privilege_type = 'EXECUTE' "
        "AND a.grantee <> p.proowner ORDER BY 1",
        execution_options={"no_parameters": True},
    )
    return [str(r[0]) for r in found]


def _readers(relation: str) -> list[str]:
    """The roles other than the owner holding SELECT on a relation (`fleet grant-reader`)."""
    found = op.get_bind().exec_driver_sql(
        "SELECT DISTINCT r.rolname FROM pg_class c "
        "CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee "
        f"WHERE c.oid = CAST('{relation}' AS regclass) AND a.privilege_type = 'SELECT' "
        "AND a.grantee <> c.relowner ORDER BY 1",
        execution_options={"no_parameters": True},
    )
    return [str(r[0]) for r in found]


def _ident(role: str) -> str:
    return '"' + role.replace('"', '""') + '"'


def _swap_snapshot(old: str, new: str, create: str) -> None:
    roles = _grantees(old)
    _execute(f"DROP FUNCTION {old}")
    _execute(create)
    _execute(f"REVOKE EXECUTE ON FUNCTION {new} FROM PUBLIC")
    for role in roles:
        _execute(f"GRANT EXECUTE ON FUNCTION {new} TO {_ident(role)}")


def upgrade() -> None:
    op.create_table(
        "fleet_node_items",
        sa.Column("store_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("item_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=True),
        sa.Column("container", sa.Text(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("value", JSONB(), nullable=True),
        sa.Column("devices", ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("store_id", "item_key", name="pk_fleet_node_items"),
        sa.CheckConstraint(
            "kind IN ('cpu', 'memory', 'dra', 'node')", name="ck_fleet_node_items_kind"
        ),
    )
    op.create_index(
        "ix_fleet_node_items_devices",
        "fleet_node_items",
        ["devices"],
        postgresql_using="gin",
    )
    schema = f0002._schema()
    _execute(_DRA_DEVICES)
    _execute(_render(_batch(), schema))
    _swap_snapshot(_SNAPSHOT_OLD, _SNAPSHOT_NEW, _render(_snapshot(), schema))

    # What the fleet already holds: DRA events list their devices, and each store's items are
    # those its latest held event per key set.
    op.execute(
        f"UPDATE fleet_events SET devices = fleet_dra_devices(device_ids) WHERE op IN ({_DRA_OPS})"
    )
    op.execute(
        f"""
        INSERT INTO fleet_node_items (store_id, item_key, kind, pod_uid, container, resource,
                                      value, devices, seq)
        SELECT l.store_id, {_key("l.pod_uid", "l.container", "l.resource")},
               split_part(l.op, '-', 1), l.pod_uid, l.container, l.resource, l.device_ids,
               CASE WHEN l.op = 'dra-set' THEN fleet_dra_devices(l.device_ids)
                    ELSE CAST(ARRAY[] AS text[]) END,
               l.seq
        FROM (SELECT DISTINCT ON (e.store_id, e.pod_uid, e.container, e.resource)
                     e.store_id, e.seq, e.op, e.pod_uid, e.container, e.resource, e.device_ids
              FROM fleet_events e WHERE e.op IN ({_NODE_OPS})
              ORDER BY e.store_id, e.pod_uid, e.container, e.resource, e.seq DESC) l
        WHERE l.op LIKE '%-set'
        """
    )

    # v_fleet_device_owners gains columns (re-created: its DISTINCT list changes). The reader
    # roles `fleet grant-reader` made keep reading it, and read the new relations too.
    readers = _readers("v_fleet_device_owners")
    op.execute("DROP VIEW v_fleet_device_owners")
    for _name, create in _VIEWS:
        op.execute(create)
    relations = ", ".join(["fleet_node_items", *(name for name, _ in _VIEWS)])
    for role in readers:
        op.execute(f"GRANT SELECT ON {relations} TO {_ident(role)}")


def downgrade() -> None:
    readers = _readers("v_fleet_device_owners")
    for name, _create in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    op.execute(_F0002_DEVICE_OWNERS)
    for role in readers:
        op.execute(f"GRANT SELECT ON v_fleet_device_owners TO {_ident(role)}")
    schema = f0002._schema()
    _swap_snapshot(
        _SNAPSHOT_NEW, _SNAPSHOT_OLD, _render(_f0002_function("fleet_ship_snapshot"), schema)
    )
    _execute(
        _render(
            _f0002_function("fleet_ship_batch").replace(
                "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
            ),
            schema,
        )
    )
    # f0002 listed no device for the node's events.
    op.execute(
        f"UPDATE fleet_events SET devices = CAST(ARRAY[] AS text[]) WHERE op IN ({_DRA_OPS})"
    )
    _execute(f"DROP FUNCTION {_DRA_DEVICES_NAME}")
    op.drop_index("ix_fleet_node_items_devices", table_name="fleet_node_items")
    op.drop_table("fleet_node_items")
