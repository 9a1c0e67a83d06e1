"""The ``op`` values a history event may carry (the CHECK of ``allocation_events.op``).

Apart from ``storage/schema.py`` because the read path needs them (``storage/node/codec.py``)
and must not load SQLAlchemy, which only a migration needs (docs/performance.md).
"""

EVENT_OPS = ("insert", "replace", "delete", "import", "backfill", "registered", "unregistered")

#: History ops of the node's other managers and facts (revision 0007): ``<kind>-set`` writes
#: the item the event's key names (its new value in ``device_ids``), ``<kind>-delete`` removes
#: it (``device_ids``: its last value). storage/node/events.py says which key means what.
NODE_EVENT_OPS = (
    "cpu-set",
    "cpu-delete",
    "memory-set",
    "memory-delete",
    "dra-set",
    "dra-delete",
    "node-set",
    "node-delete",
)
