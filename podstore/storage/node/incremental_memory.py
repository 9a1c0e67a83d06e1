"""The fast path of :mod:`.incremental` for the memory manager's file in kubelet's v3 layout.

``data`` is ``{"policyName":…,"machineState":{…},"entries":{…},"podEntries":{…}}`` (the
last two omitted when empty); each NUMA node of ``machineState``, each pod of ``entries`` (its
containers' blocks) and of ``podEntries`` (its own blocks) is decoded by the very Go types of
:mod:`podstore.checkpoint.memory_state` and turned into its items as :func:`.memory.wanted`
does (a size the store cannot hold goes to the full path, which raises).
"""

from __future__ import annotations

from itertools import chain, compress
from operator import itemgetter
from typing import Any

from podstore.checkpoint.memory_state import DATA, _entries, _machine, _pod_entries
from podstore.storage.node import memory
from podstore.storage.node.datafile import check_copy, data_file
from podstore.storage.node.delta import ItemsOf
from podstore.storage.node.items import Item, Items, Key, plain
from podstore.storage.node.members import (
    Fast,
    Last,
    Refused,
    Tables,
    expect,
    go_string,
    go_value,
    members,
    scan_value,
)

_MACHINE = DATA.fields[1].type
_ENTRIES = DATA.fields[2].type
_POD_ENTRIES = DATA.fields[3].type

# A pod's containers: the pod, its items (key, item), whether its container map is null,
# and whether it is empty.
_Pod = tuple[str, tuple[tuple[Key, Item], ...], bool, bool]


def _node(key: str | None, value: Any) -> tuple[Key, Item]:
    ((numa, node),) = _machine(go_value(_MACHINE, {}, ((key, value),))).items()  # type: ignore[union-attr]
    return (None, None, f"{memory.NUMA_PREFIX}{numa}"), memory.node_item(
        node, f"machineState[{numa}]"
    )


def _pod(key: str | None, value: Any) -> _Pod:
    ((pod, containers),) = _entries(go_value(_ENTRIES, {}, ((key, value),))).items()  # type: ignore[union-attr]
    items = tuple(
        ((pod, name, memory.RESOURCE), memory.blocks_item(blocks, f"entries[{pod!r}][{name!r}]"))
        for name, blocks in (containers or {}).items()
    )
    return pod, items, containers is None, containers is not None and not containers


def _pod_blocks(key: str | None, value: Any) -> tuple[Key, Item]:
    ((pod, blocks),) = _pod_entries(go_value(_POD_ENTRIES, {}, ((key, value),))).items()  # type: ignore[union-attr]
    return (pod, None, memory.RESOURCE), memory.blocks_item(blocks, f"podEntries[{pod!r}]")


#: The items of each table's members, in the order read() lists them.
ITEMS_OF: dict[str, ItemsOf] = {
    "entries": itemgetter(1),
    "podEntries": lambda own: (own,),
    "machineState": lambda node: (node,),
}


def read(text: str, tables: Tables, _last: Last) -> Fast:
    found = data_file(text)
    data = found.data
    value, pos = scan_value(data, expect(data, 0, '{"policyName":'))
    policy = go_string(value)
    bounds = [pos]
    nodes: list[tuple[Key, Item]] = []
    listed: list[_Pod] = []
    own: list[tuple[Key, Item]] = []
    pos = expect(data, pos, ',"machineState":')
    pos = members(data, pos, tables("machineState"), _node, nodes, array=False)
    bounds.append(pos)
    if data.startswith(',"entries":', pos):
        pos = members(data, pos + 11, tables("entries"), _pod, listed, array=False)
        bounds.append(pos)
    if data.startswith(',"podEntries":', pos):
        pos = members(data, pos + 14, tables("podEntries"), _pod_blocks, own, array=False)
        bounds.append(pos)
    if expect(data, pos, "}") != len(data):
        raise Refused
    check_copy(text, found, bounds)
    # Go's maps: a key given twice keeps its first place and its last value, as dicts do
    # (and as wanted() lists them: containers by pod, the pods' own blocks, NUMA nodes).
    pods = dict(zip(map(itemgetter(0), listed), listed, strict=True))
    items: Items = dict(chain.from_iterable(map(itemgetter(1), pods.values())))
    items.update(own)
    items.update(nodes)
    fixed = {memory.POLICY_KEY: plain(policy)}
    items.update(fixed)
    given = sum(map(len, map(itemgetter(1), listed))) + len(own) + len(nodes) + len(fixed)
    unique = len(pods) == len(listed) and given == len(items)
    form = {
        "machine_state_null": False,
        "entries_null": False,
        "pod_entries_null": False,
        "null_pods": sorted(compress(pods, map(itemgetter(2), pods.values()))),
        "empty_pods": sorted(compress(pods, map(itemgetter(3), pods.values()))),
    }
    return Fast("v3", found.stored, True, items, form, fixed, unique)
