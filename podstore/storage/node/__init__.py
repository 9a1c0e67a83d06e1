"""The node's other managers (CPU, memory, DRA), its NUMA topology and pod names, in the store.

Each kind is a set of *items*, each under the key its history events carry (``items.py``):
what a sync compares, writes and records. ``cpu.py``, ``memory.py``, ``dra.py`` and
``numa_and_names.py`` turn a checkpoint's state into items, items into rows and rows back into items
and into the state a checkpoint writer takes; ``sync.py`` brings a kind to a wanted state by
writing only the items that differ, each with its event, in the caller's transaction;
``events.py`` reads those events back (history, replay).
"""
