"""Shaping the rows of the node's reads (``storage/sql/node_read.py``) into typed results."""

from __future__ import annotations

import json
from typing import Any

from podstore.types import ContainerNuma


def _nodes(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(int(n) for n in json.loads(text))


def container_numa(row: tuple[Any, ...]) -> ContainerNuma:
    """A ``v_container_numa`` row (in ``node_read.CONTAINER_NUMA`` column order)."""
    pod, namespace, name, container, dev, cpu, mem, aligned = row
    return ContainerNuma(
        pod,
        namespace,
        name,
        container,
        _nodes(dev),
        _nodes(cpu),
        _nodes(mem),
        None if aligned is None else bool(aligned),
    )
