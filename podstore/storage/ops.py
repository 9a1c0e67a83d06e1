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

#: An interval's end evidence (revision 0010; storage/ends.py): ``device_ids`` is
#: ``{"at": TIME, "source": END_SOURCE}`` for the holder its key names. It names no device and
#: changes no state: replay passes over it.
END_EVENT_OPS = ("end",)

#: What an ``end`` event's evidence is (docs/sql.md, "v_allocation_intervals"). ``checkpoint``
#: and ``dra`` are the mechanisms' own events (a ``delete``, a claim's event), never ``end``.
END_SOURCES = ("runtime", "dra", "cpu", "memory", "pod-logs", "checkpoint")
