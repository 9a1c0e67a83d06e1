"""Audit: decoded response rows, the allocation history, and the SQL views.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Adds the five ``response_*`` tables (each allocation's ContainerAllocateResponse as rows), the
append-only ``allocation_events`` log with its per-device index table, and the views of
docs/sql.md. Upgrading a filled store backfills both: every stored response is decoded into
rows, and every existing entry gets a 'backfill' event (every registered resource a
'registered' event), so that replaying the log reproduces the state.

Everything is spelled out here — tables, view SQL, the decoding — rather than imported from
``podstore``, so that later edits to the package never change what this revision does.
Downgrading drops what this revision added; the 0001 tables and their rows are untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from google.protobuf.message import DecodeError

from podstore.deviceplugin import ContainerAllocateResponse

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("podstore")

# ---- frozen SQL (a copy of podstore/views.py as of this revision) ---------------------------

V_ALLOCATIONS = """CREATE VIEW v_allocations AS
SELECT p.uid AS pod_uid, c.name AS container, a.resource AS resource,
       d.numa_node AS numa_node, d.device_id AS device_id
FROM allocation_devices d
JOIN allocations a ON a.id = d.allocation_id
JOIN containers c ON c.id = a.container_id
JOIN pods p ON p.id = c.pod_id
"""

V_DEVICE_OWNERS = """CREATE VIEW v_device_owners AS
SELECT DISTINCT a.resource AS resource, d.device_id AS device_id,
       p.uid AS pod_uid, c.name AS container
FROM allocation_devices d
JOIN allocations a ON a.id = d.allocation_id
JOIN containers c ON c.id = a.container_id
JOIN pods p ON p.id = c.pod_id
"""

V_DOUBLE_ALLOCATIONS = """CREATE VIEW v_double_allocations AS
SELECT o.resource AS resource, o.device_id AS device_id, o.pod_uid AS pod_uid,
       o.container AS container, s.pod_count AS pod_count
FROM v_device_owners o
JOIN (SELECT resource, device_id, count(DISTINCT pod_uid) AS pod_count
      FROM v_device_owners
      GROUP BY resource, device_id
      HAVING count(DISTINCT pod_uid) > 1) s
  ON s.resource = o.resource AND s.device_id = o.device_id
"""

# Every setting of every container ranked per (container, kind, key): first wins.
_RANKED_OPTIONS = """WITH
    options (container_id, resource, kind_order, kind, position, name, value, permissions,
             read_only) AS (
        SELECT a.container_id, a.resource, 1, 'env', x.position, x.name, x.value, NULL, NULL
        FROM response_envs x JOIN allocations a ON a.id = x.allocation_id
        UNION ALL
        SELECT a.container_id, a.resource, 2, 'device', x.position, x.container_path,
               x.host_path, x.permissions, NULL
        FROM response_devices x JOIN allocations a ON a.id = x.allocation_id
        UNION ALL
        SELECT a.container_id, a.resource, 3, 'mount', x.position, x.container_path,
               x.host_path, NULL, x.read_only
        FROM response_mounts x JOIN allocations a ON a.id = x.allocation_id
        UNION ALL
        SELECT a.container_id, a.resource, 4, 'annotation', x.position, x.name, x.value,
               NULL, NULL
        FROM response_annotations x JOIN allocations a ON a.id = x.allocation_id
        UNION ALL
        SELECT a.container_id, a.resource, 5, 'cdi', x.position, x.name, NULL, NULL, NULL
        FROM response_cdi_devices x JOIN allocations a ON a.id = x.allocation_id
    ),
    ranked AS (
        SELECT o.*,
               row_number() OVER w AS rn,
               first_value(o.value) OVER w AS kept_value,
               first_value(o.resource) OVER w AS kept_resource
        FROM options o
        WINDOW w AS (PARTITION BY o.container_id, o.kind_order, o.name
                     ORDER BY o.resource, o.position)
    )
"""

V_RUN_OPTIONS = (
    "CREATE VIEW v_run_options AS\n"
    + _RANKED_OPTIONS
    + """SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind,
       row_number() OVER (PARTITION BY r.container_id, r.kind_order
                          ORDER BY r.resource, r.position) AS ordinal,
       r.name AS name, r.value AS value, r.permissions AS permissions,
       r.read_only AS read_only, r.resource AS resource
FROM ranked r
JOIN containers c ON c.id = r.container_id
JOIN pods p ON p.id = c.pod_id
WHERE r.rn = 1
"""
)

V_RUN_OPTION_CONFLICTS = (
    "CREATE VIEW v_run_option_conflicts AS\n"
    + _RANKED_OPTIONS
    + """SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind, r.name AS name,
       r.kept_value AS kept_value, r.kept_resource AS kept_resource,
       r.value AS dropped_value, r.resource AS dropped_resource
FROM ranked r
JOIN containers c ON c.id = r.container_id
JOIN pods p ON p.id = c.pod_id
WHERE r.rn > 1 AND r.value IS NOT r.kept_value
"""
)

TR_ALLOCATION_EVENTS_APPEND_ONLY = """CREATE TRIGGER tr_allocation_events_append_only
BEFORE UPDATE ON allocation_events
BEGIN
    SELECT RAISE(ABORT, 'allocation_events is append-only');
END
"""

VIEWS = (
    ("v_allocations", V_ALLOCATIONS),
    ("v_device_owners", V_DEVICE_OWNERS),
    ("v_double_allocations", V_DOUBLE_ALLOCATIONS),
    ("v_run_options", V_RUN_OPTIONS),
    ("v_run_option_conflicts", V_RUN_OPTION_CONFLICTS),
)

RESPONSE_TABLES = (
    "response_envs",
    "response_mounts",
    "response_devices",
    "response_annotations",
    "response_cdi_devices",
)

EVENT_OPS = ("insert", "replace", "delete", "import", "backfill", "registered", "unregistered")


def _response_table(name: str, *columns: sa.Column[Any]) -> None:
    op.create_table(
        name,
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        *columns,
        sa.ForeignKeyConstraint(
            ["allocation_id"],
            ["allocations.id"],
            name=f"fk_{name}_allocation_id_allocations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("allocation_id", "position", name=f"pk_{name}"),
    )


def upgrade() -> None:
    _response_table(
        "response_envs",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
    )
    _response_table(
        "response_mounts",
        sa.Column("container_path", sa.Text(), nullable=False),
        sa.Column("host_path", sa.Text(), nullable=False),
        sa.Column("read_only", sa.Boolean(), nullable=False),
    )
    _response_table(
        "response_devices",
        sa.Column("container_path", sa.Text(), nullable=False),
        sa.Column("host_path", sa.Text(), nullable=False),
        sa.Column("permissions", sa.Text(), nullable=False),
    )
    _response_table(
        "response_annotations",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
    )
    _response_table(
        "response_cdi_devices",
        sa.Column("name", sa.Text(), nullable=False),
    )
    op.create_table(
        "allocation_events",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Text(), nullable=False),
        sa.Column("op", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=True),
        sa.Column("container", sa.Text(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("device_ids", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "op IN (" + ", ".join(f"'{o}'" for o in EVENT_OPS) + ")",
            name="ck_allocation_events_op",
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_allocation_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_allocation_events_ts", "allocation_events", ["ts"], unique=False)
    op.create_index(
        "ix_allocation_events_key",
        "allocation_events",
        ["pod_uid", "container", "resource", "seq"],
        unique=False,
    )
    op.create_table(
        "allocation_event_devices",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["seq"],
            ["allocation_events.seq"],
            name="fk_allocation_event_devices_seq_allocation_events",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", "device_id", name="pk_allocation_event_devices"),
    )
    op.create_index(
        "ix_allocation_event_devices_device_id",
        "allocation_event_devices",
        ["device_id", "seq"],
        unique=False,
    )
    for _name, sql in VIEWS:
        op.execute(sql)
    op.execute(TR_ALLOCATION_EVENTS_APPEND_ONLY)
    bind = op.get_bind()
    _backfill_responses(bind)
    _backfill_events(bind)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS tr_allocation_events_append_only")
    for name, _sql in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index("ix_allocation_event_devices_device_id", table_name="allocation_event_devices")
    op.drop_table("allocation_event_devices")
    op.drop_index("ix_allocation_events_key", table_name="allocation_events")
    op.drop_index("ix_allocation_events_ts", table_name="allocation_events")
    op.drop_table("allocation_events")
    for name in reversed(RESPONSE_TABLES):
        op.drop_table(name)


# ---- backfill --------------------------------------------------------------------------------


def _backfill_responses(bind: sa.Connection) -> None:
    """Decode every stored response into rows (api.md's order: map keys sorted)."""
    envs: list[tuple[Any, ...]] = []
    mounts: list[tuple[Any, ...]] = []
    devices: list[tuple[Any, ...]] = []
    annotations: list[tuple[Any, ...]] = []
    cdi: list[tuple[Any, ...]] = []
    rows = bind.exec_driver_sql(
        "SELECT id, alloc_resp FROM allocations WHERE length(alloc_resp) > 0 ORDER BY id"
    ).fetchall()
    for aid, raw in rows:
        resp = ContainerAllocateResponse()
        try:
            resp.ParseFromString(bytes(raw))
        except (DecodeError, ValueError, TypeError, RuntimeError) as exc:
            # 0001 only stored responses that decode; should one not, keep the entry as it
            # is, without response rows, rather than refuse to open the store.
            log.warning("allocation %d: stored AllocResp does not decode (%s); no rows", aid, exc)
            continue
        envs.extend((aid, i, k, resp.envs[k]) for i, k in enumerate(sorted(resp.envs)))
        mounts.extend(
            (aid, i, m.container_path, m.host_path, m.read_only) for i, m in enumerate(resp.mounts)
        )
        devices.extend(
            (aid, i, d.container_path, d.host_path, d.permissions)
            for i, d in enumerate(resp.devices)
        )
        annotations.extend(
            (aid, i, k, resp.annotations[k]) for i, k in enumerate(sorted(resp.annotations))
        )
        cdi.extend((aid, i, c.name) for i, c in enumerate(resp.cdi_devices))
    for sql, params in (
        (
            "INSERT INTO response_envs (allocation_id, position, name, value) VALUES (?, ?, ?, ?)",
            envs,
        ),
        (
            "INSERT INTO response_mounts (allocation_id, position, container_path, host_path, "
            "read_only) VALUES (?, ?, ?, ?, ?)",
            mounts,
        ),
        (
            "INSERT INTO response_devices (allocation_id, position, container_path, host_path, "
            "permissions) VALUES (?, ?, ?, ?, ?)",
            devices,
        ),
        (
            "INSERT INTO response_annotations (allocation_id, position, name, value) "
            "VALUES (?, ?, ?, ?)",
            annotations,
        ),
        (
            "INSERT INTO response_cdi_devices (allocation_id, position, name) VALUES (?, ?, ?)",
            cdi,
        ),
    ):
        if params:
            bind.exec_driver_sql(sql, params)


def _backfill_events(bind: sa.Connection) -> None:
    """One 'backfill' event per entry (in position order), one 'registered' event per
    registered resource, all stamped with the time of the upgrade."""
    ts = datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    entries: dict[int, tuple[str, str, str, dict[int, list[str] | None] | None]] = {}
    for aid, uid, name, resource, ids_null in bind.exec_driver_sql(
        "SELECT a.id, p.uid, c.name, a.resource, a.device_ids_null FROM allocations a "
        "JOIN containers c ON c.id = a.container_id JOIN pods p ON p.id = c.pod_id ORDER BY a.id"
    ):
        entries[aid] = (uid, name, resource, None if ids_null else {})
    for aid, node, device_id in bind.exec_driver_sql(
        "SELECT allocation_id, numa_node, device_id FROM allocation_devices "
        "ORDER BY allocation_id, numa_node, position"
    ):
        per_numa = entries[aid][3]
        if per_numa is not None:
            lst = per_numa.setdefault(int(node), [])
            assert lst is not None
            lst.append(device_id)
    for aid, node, is_null in bind.exec_driver_sql(
        "SELECT allocation_id, numa_node, is_null FROM empty_numa_lists"
    ):
        per_numa = entries[aid][3]
        if per_numa is not None:
            per_numa[int(node)] = None if is_null else []
    registered: dict[str, list[str] | None] = {}
    for resource, is_null, device_id in bind.exec_driver_sql(
        "SELECT r.resource, r.is_null, d.device_id FROM registered_resources r "
        "LEFT JOIN registered_devices d ON d.resource = r.resource "
        "ORDER BY r.resource, d.position"
    ):
        if is_null:
            registered[resource] = None
            continue
        lst = registered.setdefault(resource, [])
        if device_id is not None and lst is not None:
            lst.append(device_id)

    events: list[tuple[Any, ...]] = []
    event_devices: list[tuple[int, str]] = []
    for uid, name, resource, per_numa in entries.values():
        seq = len(events) + 1
        text = None
        if per_numa is not None:
            text = json.dumps(
                {str(k): v for k, v in sorted(per_numa.items())},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            ids = {d for lst in per_numa.values() for d in lst or ()}
            event_devices.extend((seq, d) for d in sorted(ids))
        events.append((seq, ts, "backfill", uid, name, resource, text))
    for resource, lst in registered.items():
        seq = len(events) + 1
        text = None if lst is None else json.dumps(lst, ensure_ascii=False)
        event_devices.extend((seq, d) for d in sorted(set(lst or ())))
        events.append((seq, ts, "registered", None, None, resource, text))
    if events:
        bind.exec_driver_sql(
            "INSERT INTO allocation_events (seq, ts, op, pod_uid, container, resource, "
            "device_ids) VALUES (?, ?, ?, ?, ?, ?, ?)",
            events,
        )
    if event_devices:
        bind.exec_driver_sql(
            "INSERT INTO allocation_event_devices (seq, device_id) VALUES (?, ?)",
            event_devices,
        )
