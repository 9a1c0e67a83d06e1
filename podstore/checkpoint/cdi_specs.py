"""CDI spec files (``/etc/cdi``, ``/var/run/cdi``): which host device nodes each CDI device
gives a container. A node fact like the topology: read, never written.

Only what names a physical device is read: ``kind`` (``vendor/class``), ``devices[].name``,
each device's ``containerEdits.deviceNodes[]`` (``hostPath``, else ``path``) and the spec's
own ``containerEdits.deviceNodes``, which every device of the spec gets. A file that is not a
spec is skipped whole; a device that is not well formed is skipped alone. Nothing here raises
for what a file holds: ``skipped`` says what was left out and why.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

#: Where the CDI runtimes look, in increasing priority (static specs, then generated ones).
DEFAULT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
#: A spec is a few KiB; a file far larger is not one.
MAX_SPEC_BYTES = 4 * 1024 * 1024
_SUFFIXES = (".json", ".yaml")
# cdiVersion 0.3.0 up to any 1.x (the fields read here did not change across them).
_VERSION = re.compile(r"0\.[3-9]\.\d+|1\.\d+\.\d+")
_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class CdiSpecs:
    """What the CDI directories hold.

    ``devices``: per spec file read, qualified device name (``vendor/class=name``) → its host
    device nodes (sorted, distinct). ``unreadable``: spec files that could not be read as a
    whole (what they gave before is kept). ``absent``: directories that are not there (what
    they gave before is kept). ``skipped``: one line per file or device left out, and why.
    """

    dirs: tuple[str, ...]
    devices: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


class _Bad(Exception):
    """A file that is no CDI spec (the message says why)."""


def _nodes(edits: Any, where: str) -> list[str]:
    """The host paths of ``containerEdits.deviceNodes``; raises _Bad for a malformed list."""
    if edits is None:
        return []
    if not isinstance(edits, dict):
        raise _Bad(f"{where}containerEdits is not a mapping")
    nodes = edits.get("deviceNodes")
    if nodes is None:
        return []
    if not isinstance(nodes, list):
        raise _Bad(f"{where}deviceNodes is not a list")
    out = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise _Bad(f"{where}deviceNodes[{i}] is not a mapping")
        path = node.get("hostPath") or node.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            raise _Bad(f"{where}deviceNodes[{i}] has no absolute path")
        out.append(path)
    return out


def parse_spec(data: bytes, name: str) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The devices of one spec file's bytes and the devices skipped (``name`` ends in
    ``.json`` or ``.yaml``). Raises ValueError when the file is no spec at all."""
    import yaml  # only where a spec is read: the read commands start without it

    try:
        text = data.decode("utf-8")
        spec = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"not {'JSON' if name.endswith('.json') else 'YAML'}: {exc}") from None
    if not isinstance(spec, dict):
        raise ValueError("not a mapping")
    version = spec.get("cdiVersion")
    if not isinstance(version, str) or _VERSION.fullmatch(version) is None:
        raise ValueError(f"cdiVersion {version!r:.40} is not 0.3 to 1.x")
    kind = spec.get("kind")
    vendor, _, klass = kind.partition("/") if isinstance(kind, str) else ("", "", "")
    if _VENDOR.fullmatch(vendor) is None or _CLASS.fullmatch(klass) is None:
        raise ValueError(f"kind {kind!r:.80} is not vendor/class")
    devices = spec.get("devices")
    if not isinstance(devices, list):
        raise ValueError("devices is not a list")
    try:
        common = _nodes(spec.get("containerEdits"), "")
    except _Bad as exc:
        raise ValueError(str(exc)) from None
    out: dict[str, tuple[str, ...]] = {}
    skipped: list[str] = []
    for i, device in enumerate(devices):
        dev_name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(dev_name, str) or _DEVICE.fullmatch(dev_name) is None:
            skipped.append(f"devices[{i}]: no valid name")
            continue
        qualified = f"{kind}={dev_name}"
        if qualified in out:
            skipped.append(f"{qualified}: named again (the first is kept)")
            continue
        try:
            own = _nodes(device.get("containerEdits"), f"{qualified}: ")
        except _Bad as exc:
            skipped.append(str(exc))
            continue
        # The spec's own nodes (control devices) go with a device that names a node of its
        # own; alone they would make the device look like a part of every other one.
        out[qualified] = tuple(sorted(set(own + common))) if own else ()
    return out, skipped


def _shown(path: str) -> str:
    return path.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")


def read_cdi_specs(dirs: tuple[str, ...] | list[str] = DEFAULT_CDI_DIRS) -> CdiSpecs:
    """Read every ``*.json`` and ``*.yaml`` file of ``dirs`` (other names are not specs). A
    directory that is not there, or cannot be listed, is ``absent``."""
    devices: dict[str, dict[str, tuple[str, ...]]] = {}
    unreadable: list[str] = []
    absent: list[str] = []
    skipped: list[str] = []
    named: dict[str, str] = {}
    for directory in (os.path.abspath(os.fspath(d)) for d in dirs):
        try:
            with os.scandir(directory) as it:
                names = sorted(e.name for e in it if e.name.endswith(_SUFFIXES))
        except OSError:
            absent.append(directory)
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    data = f.read(MAX_SPEC_BYTES + 1)
                if len(data) > MAX_SPEC_BYTES:
                    raise ValueError(f"larger than {MAX_SPEC_BYTES} bytes")
                found, bad = parse_spec(data, name)
            except (OSError, ValueError) as exc:
                unreadable.append(path)
                skipped.append(f"{_shown(path)}: {exc}")
                continue
            skipped.extend(f"{_shown(path)}: {b}" for b in bad)
            for qualified in found:
                if qualified in named:
                    skipped.append(
                        f"{_shown(path)}: {qualified} also in {_shown(named[qualified])} "
                        "(both are kept)"
                    )
                named.setdefault(qualified, path)
            devices[path] = found
    return CdiSpecs(
        tuple(os.path.abspath(os.fspath(d)) for d in dirs),
        devices,
        tuple(unreadable),
        tuple(absent),
        tuple(skipped),
    )
