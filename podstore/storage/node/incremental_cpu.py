"""The fast path of :mod:`.incremental` for the CPU manager's file in kubelet's v4 layout.

``data`` is ``{"policyName":…,"defaultCpuSet":…,"entries":{…},"podEntries":{…}}`` (the two
maps omitted when empty); each member of ``entries`` (a pod's containers) and of
``podEntries`` (a pod's own CPUs) is decoded by the very Go types and cpuset parser of
:mod:`podstore.checkpoint.cpu_state` and turned into its items as :func:`.cpu.wanted` does.
"""

from __future__ import annotations

from itertools import chain, compress
from operator import itemgetter
from typing import Any

from podstore.checkpoint.cpu_state import DATA, LEGACY_TYPE_NAME, _entries, _pod_entries
from podstore.checkpoint.cpuset import parse_cpuset
from podstore.storage.node import cpu
from podstore.storage.node.datafile import check_copy, data_file
from podstore.storage.node.items import Item, Items, Key, plain
from podstore.storage.node.members import (
    Fast,
    Refused,
    Tables,
    expect,
    go_string,
    go_value,
    members,
    scan_value,
)

_ENTRIES = DATA.fields[2].type
_POD_ENTRIES = DATA.fields[3].type

# A pod's containers: the pod, its items (key, item), whether its container map is empty.
_Pod = tuple[str, tuple[tuple[Key, Item], ...], bool]


def _pod(key: str | None, value: Any) -> _Pod:
    decoded = go_value(_ENTRIES, {}, ((key, value),))
    ((pod, containers),) = _entries(decoded, "", "data.").items()
    items = tuple(((pod, name, cpu.RESOURCE), cpu.cpus_item(c)) for name, c in containers.items())
    return pod, items, not containers


def _pod_cpus(key: str | None, value: Any) -> tuple[Key, Item]:
    decoded = go_value(_POD_ENTRIES, {}, ((key, value),))
    ((pod, cpus),) = _pod_entries(decoded).items()
    return (pod, None, cpu.RESOURCE), cpu.cpus_item(cpus)


def read(text: str, tables: Tables) -> Fast:
    found = data_file(text)
    data = found.data
    value, pos = scan_value(data, expect(data, 0, '{"policyName":'))
    policy = go_string(value)
    bounds = [pos]
    value, pos = scan_value(data, expect(data, pos, ',"defaultCpuSet":'))
    shared = go_string(value)
    bounds.append(pos)
    listed: list[_Pod] = []
    own: list[tuple[Key, Item]] = []
    if data.startswith(',"entries":', pos):
        pos = members(data, pos + 11, tables("entries"), _pod, listed, array=False)
        bounds.append(pos)
    if data.startswith(',"podEntries":', pos):
        pos = members(data, pos + 14, tables("podEntries"), _pod_cpus, own, array=False)
        bounds.append(pos)
    if expect(data, pos, "}") != len(data):
        raise Refused
    check_copy(text, found, bounds)
    try:
        default = parse_cpuset(shared)
    except Exception:
        raise Refused from None
    # Go's maps: a key given twice keeps its first place and its last value, as dicts do
    # (and as wanted() lists them: containers by pod, then the pods' own CPUs).
    pods = dict(zip(map(itemgetter(0), listed), listed, strict=True))
    items: Items = dict(chain.from_iterable(map(itemgetter(1), pods.values())))
    items.update(own)
    items[cpu.SHARED_KEY] = cpu.cpus_item(default)
    items[cpu.POLICY_KEY] = plain(policy)
    form = {
        "type_name": LEGACY_TYPE_NAME,
        "empty_pods": sorted(compress(pods, map(itemgetter(2), pods.values()))),
    }
    return "v4", found.stored, True, items, form
