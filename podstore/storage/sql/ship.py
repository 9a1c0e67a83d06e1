"""The SQL of shipping the history to the fleet (``podstore.fleet.ship``): events after a ``seq``,
and where the numbering stands.

Event numbers are dense (a failed transaction rolls its number back), so a number missing below
:data:`HIGH_WATER` was pruned.
"""

from __future__ import annotations

from podstore.storage.sql import events

#: The newest seq ever handed out (0 before the first event), pruned or not.
HIGH_WATER = events.HIGH_WATER

_EVENT_COLUMNS = "seq, ts, op, pod_uid, container, resource, device_ids, released, hash"

#: Up to ``limit`` events after ``seq``, oldest first: (seq, ts, op, pod_uid, container,
#: resource, device_ids, released, hash) — the fields ``pure/chain.canonical`` covers, as
#: stored, and the event's hash (32 bytes). What event ``seq`` chains from:
#: ``storage/events.prev_hash``.
EVENTS_AFTER = f"""
    SELECT {_EVENT_COLUMNS} FROM allocation_events
    WHERE seq > ? ORDER BY seq LIMIT ?
"""

#: The earliest stored time among the events after a seq, by time rather than by seq: a clock
#: that went back can give a later event an earlier time, and a retention cut held at what
#: the fleet lacks must pass none of them.
OLDEST_TS_AFTER = "SELECT min(ts) FROM allocation_events WHERE seq > ?"

#: Every event up to and including ``seq`` after ``after`` (a snapshot's kept history), with
#: the columns of :data:`EVENTS_AFTER`.
EVENTS_BETWEEN = f"""
    SELECT {_EVENT_COLUMNS} FROM allocation_events
    WHERE seq > ? AND seq <= ? ORDER BY seq
"""

#: (seq, device_id) of the devices the events in (after, through] list (held after the event,
#: or until it for a delete; not those a replace released), in seq order.
EVENT_DEVICES_BETWEEN = """
    SELECT seq, device_id FROM allocation_event_devices
    WHERE seq > ? AND seq <= ? AND released = 0
    ORDER BY seq, device_id
"""

# ---- the node's physical-device facts a ship sends beside the events (fleet revision f0008) ----

PHYSICAL_CDI = "SELECT spec_path, name, host_path FROM cdi_device_nodes"
#: What each entry's response names: its host device nodes and its CDI device names.
PHYSICAL_RESPONSES = """
    SELECT p.uid, c.name, a.resource, 'host', r.host_path
    FROM response_devices r
    JOIN allocations a ON a.id = r.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
    WHERE r.host_path <> ''
    UNION
    SELECT p.uid, c.name, a.resource, 'cdi', r.name
    FROM response_cdi_devices r
    JOIN allocations a ON a.id = r.allocation_id
    JOIN containers c ON c.id = a.container_id
    JOIN pods p ON p.id = c.pod_id
"""
