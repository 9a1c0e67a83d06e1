"""The node's other managers (CPU, memory, DRA), its NUMA topology and pod names, in the store.

Each kind is a set of *items* (``items.py``) that ``cpu.py``, ``memory.py``, ``dra.py`` and
``numa_and_names.py`` map to and from rows and states; ``sync.py`` writes only the items that
differ, each with its event.
"""
