"""The SQL views: podstore's public SQL contract (docs/sql.md), and the run-option merge.

Each migration creates the views from a frozen copy of this text, so a change here needs a new
revision (a test holds a store at head to exactly this SQL).
"""

from __future__ import annotations


def _options(where: str) -> str:
    """Every decoded setting of the selected allocations in one shape: ``name`` the merge key,
    ``value`` what a conflict compares (NULL for CDI)."""
    where = f" {where}" if where else ""

    def each(section: str) -> str:
        return f"FROM allocations a, json_each(a.response, '$.{section}') x{where}"

    return f"""
    options (container_id, resource, kind_order, kind, position, name, value, permissions,
             read_only) AS (
        SELECT a.container_id, a.resource, 1, 'env', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), NULL, NULL
        {each("envs")}
        UNION ALL
        SELECT a.container_id, a.resource, 2, 'device', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), json_extract(x.value, '$[2]'), NULL
        {each("devices")}
        UNION ALL
        SELECT a.container_id, a.resource, 3, 'mount', x.key, json_extract(x.value, '$[0]'),
               json_extract(x.value, '$[1]'), NULL, json_extract(x.value, '$[2]')
        {each("mounts")}
        UNION ALL
        SELECT a.container_id, a.resource, 4, 'annotation', x.key,
               json_extract(x.value, '$[0]'), json_extract(x.value, '$[1]'), NULL, NULL
        {each("annotations")}
        UNION ALL
        SELECT a.container_id, a.resource, 5, 'cdi', x.key, x.value, NULL, NULL, NULL
        {each("cdi_devices")}
    )"""


# api.md's first-wins rule: per container and key, the setting of the resource first in byte
# order (BINARY collation), then first in the response, wins; rn > 1 rows are dropped, and a
# dropped row whose value differs from the kept one is a conflict.
_RANKED = """
    ranked AS (
        SELECT o.*,
               row_number() OVER w AS rn,
               first_value(o.value) OVER w AS kept_value,
               first_value(o.resource) OVER w AS kept_resource
        FROM options o
        WINDOW w AS (PARTITION BY o.container_id, o.kind_order, o.name
                     ORDER BY o.resource, o.position)
    )"""


def _ranked(where: str) -> str:
    return "WITH" + _options(where) + "," + _RANKED


# ---- the relations revision 0006 turned into views ------------------------------------------
#
# Their names and columns are the contract of docs/sql.md; what they read is stored once.

# An entry's devices now: its device spans that no event has ended (schema.py).
ALLOCATION_DEVICES = """
CREATE VIEW allocation_devices AS
SELECT allocation_id, numa_node, position, device_id
FROM allocation_device_spans
WHERE until_seq IS NULL
"""

# Each (event, device) pair of the history, from the spans and event_device_rows; a device
# both listed and released by one event is listed; pruned events are not shown.
_EVENT_DEVICE_PAIRS = """
    SELECT since_seq AS seq, device_id, 0 AS released FROM allocation_device_spans
    UNION ALL
    SELECT until_seq, device_id, until_released FROM allocation_device_spans
    WHERE until_released IS NOT NULL
    UNION ALL
    SELECT seq, device_id, released FROM event_device_rows
"""
ALLOCATION_EVENT_DEVICES = f"""
CREATE VIEW allocation_event_devices AS
SELECT n.seq AS seq, n.device_id AS device_id, min(n.released) AS released
FROM ({_EVENT_DEVICE_PAIRS}) n
WHERE EXISTS (SELECT 1 FROM allocation_events e WHERE e.seq = n.seq)
GROUP BY n.seq, n.device_id
"""


def _response_view(name: str, section: str, columns: str) -> str:
    return f"""
CREATE VIEW {name} AS
SELECT a.id AS allocation_id, x.key AS position, {columns}
FROM allocations a, json_each(a.response, '$.{section}') x
"""


RESPONSE_ENVS = _response_view(
    "response_envs",
    "envs",
    "json_extract(x.value, '$[0]') AS name, json_extract(x.value, '$[1]') AS value",
)
RESPONSE_MOUNTS = _response_view(
    "response_mounts",
    "mounts",
    "json_extract(x.value, '$[0]') AS container_path, json_extract(x.value, '$[1]') AS "
    "host_path, json_extract(x.value, '$[2]') AS read_only",
)
RESPONSE_DEVICES = _response_view(
    "response_devices",
    "devices",
    "json_extract(x.value, '$[0]') AS container_path, json_extract(x.value, '$[1]') AS "
    "host_path, json_extract(x.value, '$[2]') AS permissions",
)
RESPONSE_ANNOTATIONS = _response_view(
    "response_annotations",
    "annotations",
    "json_extract(x.value, '$[0]') AS name, json_extract(x.value, '$[1]') AS value",
)
RESPONSE_CDI_DEVICES = _response_view("response_cdi_devices", "cdi_devices", "x.value AS name")

# Every device row with the names of its entry.
_HELD = """FROM allocation_devices d
JOIN allocations a ON a.id = d.allocation_id
JOIN containers c ON c.id = a.container_id
JOIN pods p ON p.id = c.pod_id
"""

V_ALLOCATIONS = f"""
CREATE VIEW v_allocations AS
SELECT p.uid AS pod_uid, c.name AS container, a.resource AS resource,
       d.numa_node AS numa_node, d.device_id AS device_id
{_HELD}"""

V_DEVICE_OWNERS = f"""
CREATE VIEW v_device_owners AS
SELECT DISTINCT a.resource AS resource, d.device_id AS device_id,
       p.uid AS pod_uid, c.name AS container
{_HELD}"""

# Containers of one pod may share a device (kubelet reuses init containers' devices), so only
# a device held from more than one pod is a double allocation.
V_DOUBLE_ALLOCATIONS = """
CREATE VIEW v_double_allocations AS
SELECT o.resource AS resource, o.device_id AS device_id, o.pod_uid AS pod_uid,
       o.container AS container, s.pod_count AS pod_count
FROM v_device_owners o
JOIN (SELECT resource, device_id, count(DISTINCT pod_uid) AS pod_count
      FROM v_device_owners
      GROUP BY resource, device_id
      HAVING count(DISTINCT pod_uid) > 1) s
  ON s.resource = o.resource AND s.device_id = o.device_id
"""

V_RUN_OPTIONS = (
    """
CREATE VIEW v_run_options AS
"""
    + _ranked("")
    + """
SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind,
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
    """
CREATE VIEW v_run_option_conflicts AS
"""
    + _ranked("")
    + """
SELECT p.uid AS pod_uid, c.name AS container, r.kind AS kind, r.name AS name,
       r.kept_value AS kept_value, r.kept_resource AS kept_resource,
       r.value AS dropped_value, r.resource AS dropped_resource
FROM ranked r
JOIN containers c ON c.id = r.container_id
JOIN pods p ON p.id = c.pod_id
WHERE r.rn > 1 AND r.value IS NOT r.kept_value
"""
)

# Prune deletes events; nothing may rewrite one.
TR_EVENTS_APPEND_ONLY = """
CREATE TRIGGER tr_allocation_events_append_only
BEFORE UPDATE ON allocation_events
BEGIN
    SELECT RAISE(ABORT, 'allocation_events is append-only');
END
"""

#: (name, CREATE statement) in creation order; drop in reverse.
VIEWS: tuple[tuple[str, str], ...] = (
    ("allocation_devices", ALLOCATION_DEVICES),
    ("allocation_event_devices", ALLOCATION_EVENT_DEVICES),
    ("response_envs", RESPONSE_ENVS),
    ("response_mounts", RESPONSE_MOUNTS),
    ("response_devices", RESPONSE_DEVICES),
    ("response_annotations", RESPONSE_ANNOTATIONS),
    ("response_cdi_devices", RESPONSE_CDI_DEVICES),
    ("v_allocations", V_ALLOCATIONS),
    ("v_device_owners", V_DEVICE_OWNERS),
    ("v_double_allocations", V_DOUBLE_ALLOCATIONS),
    ("v_run_options", V_RUN_OPTIONS),
    ("v_run_option_conflicts", V_RUN_OPTION_CONFLICTS),
)
TRIGGERS: tuple[tuple[str, str], ...] = (
    ("tr_allocation_events_append_only", TR_EVENTS_APPEND_ONLY),
)

# One container's settings, winners and conflicts, in merge order. A first row with kind_order
# 0 says the container exists: no rows is "unknown container", a lone marker "no settings".
RUN_OPTIONS_FOR_CONTAINER = (
    """
    WITH target (id) AS (
        SELECT c.id FROM pods p JOIN containers c ON c.pod_id = p.id
        WHERE p.uid = :pod AND c.name = :container
    ),"""
    + _options("WHERE a.container_id IN (SELECT id FROM target)")
    + ","
    + _RANKED
    + """
    SELECT 0 AS kind_order, NULL AS resource, NULL AS position, NULL, NULL, NULL, NULL, 1,
           NULL
    FROM target
    UNION ALL
    SELECT kind_order, resource, position, name, value, permissions, read_only, rn,
           kept_value
    FROM ranked
    WHERE rn = 1 OR value IS NOT kept_value
    ORDER BY resource, kind_order, position
"""
)
