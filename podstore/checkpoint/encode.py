"""Write a v2 (or v1) checkpoint byte for byte as kubelet's ``json.Marshal`` would."""

from __future__ import annotations

import binascii
from collections.abc import Mapping, Sequence

from podstore.checkpoint import gojson, spew, values
from podstore.checkpoint.bulk import collector_paused
from podstore.errors import InvalidInputError
from podstore.types import PodDevicesEntry


def dumps_checkpoint(
    entries: Sequence[PodDevicesEntry] | None,
    registered_devices: Mapping[str, Sequence[str] | None] | None,
    boot_id: str | None = None,
    *,
    version: int = 2,
) -> bytes:
    """The exact bytes kubelet's ``json.Marshal`` writes for these values, with their checksum
    (``BootID`` only when ``boot_id`` is non-empty: outside ``Data``, not hashed; kubernetes PR
    #137919). ``None`` is ``null``; map keys sorted as Go sorts them (``"-1","0","1","10","2"``).

    The checksum covers the values as kubelet will decode these bytes, so the result always
    verifies (a lone surrogate as U+FFFD; Go itself would hash the invalid byte and write a
    file that fails verification).

    ``version`` 1 writes the format of kubelet 1.18–1.19 (``DeviceIDs`` a plain list, hashed
    by the v1 rule); its entries hold their IDs as :func:`read_checkpoint` gives a v1 file's,
    ``{0: ids}``.

    Raises :class:`InvalidInputError` for values of the wrong type, a NUMA id outside int64,
    two resource names that differ only in lone surrogates, or, in v1, device IDs under
    another key than 0, or a ``boot_id``.
    """
    if boot_id is not None and not isinstance(boot_id, str):
        raise InvalidInputError(f"boot_id must be a str or None, not {type(boot_id).__name__}")
    if version not in (1, 2):
        raise InvalidInputError(f"version must be 1 or 2, not {version!r}")
    if version == 1 and boot_id:
        raise InvalidInputError("boot_id: a v1 checkpoint has no BootID")
    with collector_paused():
        checked_entries, checked_registered = values.normalize(entries, registered_devices)
        clean_entries, clean_registered = values.sanitize(checked_entries, checked_registered)
        if version == 1:
            for i, e in enumerate(checked_entries or ()):
                if e.device_ids is not None and set(e.device_ids) != {0}:
                    raise InvalidInputError(
                        f"entries[{i}].device_ids: a v1 entry holds its IDs as {{0: ids}}"
                    )
        checksum = spew.checksum_of(clean_entries, clean_registered, version)
        del clean_entries, clean_registered

        document: dict[str, object] = {
            "Data": {
                "PodDeviceEntries": _entries_json(checked_entries, version == 1),
                "RegisteredDevices": _registered_json(checked_registered),
            },
            "Checksum": checksum,
        }
        if boot_id:
            document["BootID"] = boot_id
        return gojson.encode(document)


def _entries_json(entries: values.Entries, v1: bool = False) -> list[dict[str, object]] | None:
    if entries is None:
        return None
    out: list[dict[str, object]] = []
    for e in entries:
        devs = e.device_ids
        resp = e.alloc_resp
        if v1:
            out.append(
                {
                    "PodUID": e.pod_uid,
                    "ContainerName": e.container_name,
                    "ResourceName": e.resource_name,
                    "DeviceIDs": None if devs is None else devs[0],
                    "AllocResp": None if resp is None else _base64(resp),
                }
            )
            continue
        out.append(
            {
                "PodUID": e.pod_uid,
                "ContainerName": e.container_name,
                "ResourceName": e.resource_name,
                "DeviceIDs": None if devs is None else _numa_json(devs),
                "AllocResp": None if resp is None else _base64(resp),
            }
        )
    return out


def _base64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _numa_json(devs: dict[int, list[str] | None]) -> dict[str, list[str] | None]:
    # Go writes integer map keys in decimal and sorts them as strings ("-1","0","1","10","2").
    # For ids from -1 to 9, the usual ones, numeric order is the same and cheaper.
    order = sorted(devs)
    if len(order) > 1 and (order[0] < -1 or order[-1] > 9):
        order.sort(key=str)
    return {str(numa): devs[numa] for numa in order}


def _go_order(name: str) -> bytes:
    # Go compares the raw bytes of map keys; a lone surrogate from surrogateescape stands for
    # the byte it escaped, any other lone surrogate for a byte that is not UTF-8 either.
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def _registered_json(registered: values.Registered) -> dict[str, list[str] | None] | None:
    if registered is None:
        return None
    if all(name.isascii() for name in registered):
        return {name: registered[name] for name in sorted(registered)}
    return {name: registered[name] for name in sorted(registered, key=_go_order)}
