"""The fast path of :mod:`.incremental` for the CPU manager's file in kubelet's v4 layout.

``data`` is ``{"policyName":…,"defaultCpuSet":…,"entries":{…},"podEntries":{…}}`` (the two
maps omitted when empty); each member of ``entries`` (a pod's containers) and of
``podEntries`` (a pod's own CPUs) is decoded by the very Go types and cpuset parser of
:mod:`podstore.checkpoint.cpu_state` and turned into its items as :func:`.cpu.wanted` does.

A rewrite that changed a few pods costs little more than finding them: the members are read
in the older copy (``data``'s text, unescaped, as kubelet writes it) and ``data`` is checked
by escaping that text; and when the last read's pods were each listed once, what the read
needs of the others — are its pods each listed once, how many items, which pods have no
container — comes from the last read's :class:`Summary` and the members that changed, and
the items' dict is built only if something asks for it (``items.LazyItems``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain, compress
from operator import itemgetter
from typing import Any

from podstore.checkpoint import spew
from podstore.checkpoint.cpu_state import DATA, LEGACY_TYPE_NAME, _entries, _pod_entries
from podstore.checkpoint.cpuset import parse_cpuset
from podstore.checkpoint.gotypes import CHECKSUM
from podstore.storage.node import cpu
from podstore.storage.node.datafile import TAIL, check_copy, data_file
from podstore.storage.node.delta import ItemsOf
from podstore.storage.node.escaped import check_escaped
from podstore.storage.node.items import Item, Items, Key, LazyItems, plain
from podstore.storage.node.members import (
    Fast,
    Last,
    MemberCache,
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


#: The items of each table's members, in the order read() lists them.
ITEMS_OF: dict[str, ItemsOf] = {
    "entries": itemgetter(1),
    "podEntries": lambda own: (own,),
}
_VALUE = itemgetter(2)
_ITEMS = itemgetter(1)


@dataclass(slots=True)
class Summary:
    """Of the last fast read, when its pods were each listed once: the pods of ``entries``
    and of ``podEntries``, the pods with no container, and how many items it had."""

    pods: set[str]
    owners: set[str | None]
    empty: set[str]
    count: int


def read(text: str, tables: Tables, last: Last) -> Fast:
    # Kubelet writes the older copy as ``data``'s whole text but its closing brace, and the
    # file in ASCII: the members are then read in the copy, and ``data`` is checked by
    # escaping that text (no unescape of the whole string). Anything else, or any doubt
    # there, reads ``data`` itself.
    if text.isascii():
        try:
            return _read_copy(text, tables, last)
        except Refused:
            for name in ITEMS_OF:
                tables(name).discard()
    return _read_data(text, tables, last)


def _read_copy(text: str, tables: Tables, last: Last) -> Fast:
    """:func:`_read_data`'s result when the copy is ``data`` but its last ``}``."""
    end = text.rfind(TAIL)  # the top-level one: no ',"' is inside a JSON string
    policy, shared, listed, own, bounds, parsed = _state(text, tables)
    if bounds[-1] != end:
        raise Refused
    value, pos = scan_value(text, end + len(TAIL))
    go_value(CHECKSUM, 0, value)
    pos = expect(text, pos, ',"data":"')
    # What escaping gives back unescapes to ``data``, unless ``data`` holds a character a
    # JSON string must escape otherwise: only whitespace between tokens can be one, as every
    # member was scanned (strictly) or found equal to one that was.
    if any(text.find(c, 0, end) >= 0 for c in "\n\r\t"):
        raise Refused
    pos = check_escaped(text, pos, end, parsed)
    value, pos = scan_value(text, expect(text, pos, '","dataChecksum":'))
    stored: int = go_value(CHECKSUM, 0, value)
    if expect(text, pos, "}") != len(text):
        raise Refused
    data = text[:end] + "}"
    if spew.checksum_string(data) != stored:
        raise Refused  # the full decoder raises the mismatch
    return _fast(policy, shared, listed, own, stored, tables, last)


def _read_data(text: str, tables: Tables, last: Last) -> Fast:
    last.unescaped += 1
    found = data_file(text)
    policy, shared, listed, own, bounds, _ = _state(found.data, tables)
    if expect(found.data, bounds[-1], "}") != len(found.data):
        raise Refused
    check_copy(text, found, bounds)
    return _fast(policy, shared, listed, own, found.stored, tables, last)


def _state(
    data: str, tables: Tables
) -> tuple[str, str, list[_Pod], list[tuple[Key, Item]], list[int], list[MemberCache]]:
    """The policy, shared CPUs, pods and pods' own CPUs of the state's JSON text at the start
    of ``data``, where each of its top-level members ends, and the tables it read."""
    value, pos = scan_value(data, expect(data, 0, '{"policyName":'))
    policy = go_string(value)
    bounds = [pos]
    value, pos = scan_value(data, expect(data, pos, ',"defaultCpuSet":'))
    shared = go_string(value)
    bounds.append(pos)
    listed: list[_Pod] = []
    own: list[tuple[Key, Item]] = []
    parsed: list[MemberCache] = []
    if data.startswith(',"entries":', pos):
        parsed.append(tables("entries"))
        pos = members(data, pos + 11, parsed[-1], _pod, listed, array=False)
        bounds.append(pos)
    if data.startswith(',"podEntries":', pos):
        parsed.append(tables("podEntries"))
        pos = members(data, pos + 14, parsed[-1], _pod_cpus, own, array=False)
        bounds.append(pos)
    return policy, shared, listed, own, bounds, parsed


def _fast(
    policy: str,
    shared: str,
    listed: list[_Pod],
    own: list[tuple[Key, Item]],
    stored: int,
    tables: Tables,
    last: Last,
) -> Fast:
    """The read's result; the last thing a read does (it keeps its summary in ``last``)."""
    try:
        default = parse_cpuset(shared)
    except Exception:
        raise Refused from None
    fixed = {cpu.SHARED_KEY: cpu.cpus_item(default), cpu.POLICY_KEY: plain(policy)}
    summary = last.summary if last.generation is not None else None
    known = None
    if isinstance(summary, Summary):
        known = _from_summary(summary, tables("entries"), tables("podEntries"))
    if known is not None:
        count, empty = known
        items: Mapping[Key, Item] = LazyItems(lambda: _items(listed, own, fixed), count)
        form = {"type_name": LEGACY_TYPE_NAME, "empty_pods": sorted(empty)}
        return Fast("v4", stored, True, items, form, fixed, True)
    # Go's maps: a key given twice keeps its first place and its last value, as dicts do
    # (and as wanted() lists them: containers by pod, then the pods' own CPUs).
    pods = dict(zip(map(itemgetter(0), listed), listed, strict=True))
    full: Items = dict(chain.from_iterable(map(_ITEMS, pods.values())))
    full.update(own)
    full.update(fixed)
    given = sum(map(len, map(_ITEMS, listed))) + len(own) + len(fixed)
    unique = len(pods) == len(listed) and given == len(full)
    empty_pods = sorted(compress(pods, map(itemgetter(2), pods.values())))
    last.summary = (
        Summary(set(pods), {key[0] for key, _ in own}, set(empty_pods), len(full))
        if unique
        else None
    )
    form = {"type_name": LEGACY_TYPE_NAME, "empty_pods": empty_pods}
    return Fast("v4", stored, True, full, form, fixed, unique)


def _items(listed: list[_Pod], own: list[tuple[Key, Item]], fixed: Items) -> Items:
    """The items of pods each listed once, in wanted()'s order."""
    items: Items = dict(chain.from_iterable(map(_ITEMS, listed)))
    items.update(own)
    items.update(fixed)
    return items


def _from_summary(
    summary: Summary, entries: MemberCache, owners: MemberCache
) -> tuple[int, set[str]] | None:
    """From the last read's summary and the members that changed since: this read's item
    count and pods with no container, when its pods are each listed once (None: not, or
    not known so); the summary is brought up to this read."""
    fresh: list[_Pod] = list(map(_VALUE, entries.fresh))
    gone: list[_Pod] = list(map(_VALUE, entries.dropped()))
    fresh_own: list[tuple[Key, Item]] = list(map(_VALUE, owners.fresh))
    gone_own: list[tuple[Key, Item]] = list(map(_VALUE, owners.dropped()))
    new_pods = [pod[0] for pod in fresh]
    new_owners = [key[0] for key, _ in fresh_own]
    if not (
        _once(summary.pods, {pod[0] for pod in gone}, new_pods)
        and _once(summary.owners, {key[0] for key, _ in gone_own}, new_owners)
    ):
        return None
    count = (
        summary.count
        - sum(map(len, map(_ITEMS, gone)))
        - len(gone_own)
        + sum(map(len, map(_ITEMS, fresh)))
        + len(fresh_own)
    )
    # Each set loses the pods of the members gone, then gains those of the new ones.
    summary.pods.difference_update(pod[0] for pod in gone)
    summary.pods.update(new_pods)
    summary.owners.difference_update(key[0] for key, _ in gone_own)
    summary.owners.update(new_owners)
    summary.empty.difference_update(pod[0] for pod in gone)
    summary.empty.update(pod[0] for pod in fresh if pod[2])
    summary.count = count
    return count, summary.empty


def _once(before: set[Any], gone: set[Any], new: list[Any]) -> bool:
    """Whether the pods ``new`` lists, joining those ``before`` listed less ``gone``, leave
    every pod listed once."""
    return len(set(new)) == len(new) and not any(p in before and p not in gone for p in new)
