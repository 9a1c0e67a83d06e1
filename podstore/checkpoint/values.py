"""Checks on caller-supplied checkpoint values, before they are hashed or written.

Two steps, because the encoder needs the values as given and the checksum needs them as kubelet
will decode them: :func:`normalize`, then :func:`sanitize`. Both return the caller's own objects
when nothing changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from podstore.checkpoint.gojson import fix_string
from podstore.errors import InvalidInputError
from podstore.pure import validate
from podstore.types import PodDevicesEntry

Entries = list[PodDevicesEntry] | None
Registered = dict[str, list[str] | None] | None


def normalize(entries: object, registered_devices: object) -> tuple[Entries, Registered]:
    """Entries and registered devices type-checked, as lists, dicts and bytes (strings as given).

    Raises :class:`InvalidInputError` naming the first offending value.
    """
    return _entries(entries), validate.registered(
        registered_devices, "registered_devices", storable=False
    )


def _entries(entries: object) -> Entries:
    if entries is None:
        return None
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidInputError(
            f"entries must be a sequence of PodDevicesEntry or None, not {type(entries).__name__}"
        )
    out = entries if type(entries) is list else list(entries)
    for i, e in enumerate(out):
        if not isinstance(e, PodDevicesEntry):
            raise InvalidInputError(f"entries[{i}] is a {type(e).__name__}, not a PodDevicesEntry")
        fixed = _entry(e, i)
        if fixed is not e:
            if out is entries:
                out = list(out)
            out[i] = fixed
    return out


def _entry(e: PodDevicesEntry, i: int) -> PodDevicesEntry:
    where = f"entries[{i}]"
    uid = validate.go_string(e.pod_uid, f"{where}.pod_uid")
    cont = validate.go_string(e.container_name, f"{where}.container_name")
    res = validate.go_string(e.resource_name, f"{where}.resource_name")
    devs = validate.numa_map(e.device_ids, f"{where}.device_ids", storable=False)
    resp = e.alloc_resp
    if resp is not None and type(resp) is not bytes:
        if not isinstance(resp, bytes | bytearray | memoryview):
            raise InvalidInputError(
                f"{where}.alloc_resp must be bytes or None, not {type(resp).__name__}"
            )
        resp = bytes(resp)
    if (
        uid is e.pod_uid
        and cont is e.container_name
        and res is e.resource_name
        and devs is e.device_ids
        and resp is e.alloc_resp
    ):
        return e
    return PodDevicesEntry(uid, cont, res, devs, resp)


def sanitize(entries: Entries, registered_devices: Registered) -> tuple[Entries, Registered]:
    """The normalized values as kubelet decodes them back: lone surrogates become U+FFFD.

    Raises :class:`InvalidInputError` when two resource names of ``registered_devices`` become
    equal, because no file can then carry both.
    """
    return _sanitize_entries(entries), _sanitize_registered(registered_devices)


def _sanitize_ids(ids: list[str] | None) -> list[str] | None:
    if ids is None or "".join(ids).isascii():
        return ids
    fixed = [fix_string(s) for s in ids]
    return ids if all(a is b for a, b in zip(fixed, ids, strict=True)) else fixed


def _sanitize_entries(entries: Entries) -> Entries:
    if entries is None:
        return None
    out = entries
    for i, e in enumerate(entries):
        uid, cont, res = e.pod_uid, e.container_name, e.resource_name
        devs = e.device_ids
        if (uid + cont + res).isascii() and (
            devs is None or all(v is None or "".join(v).isascii() for v in devs.values())
        ):
            continue
        uid, cont, res = fix_string(uid), fix_string(cont), fix_string(res)
        if devs is not None:
            clean = {numa: _sanitize_ids(ids) for numa, ids in devs.items()}
            if any(clean[numa] is not ids for numa, ids in devs.items()):
                devs = clean
        unchanged = uid is e.pod_uid and cont is e.container_name and res is e.resource_name
        if unchanged and devs is e.device_ids:
            continue
        if out is entries:
            out = list(entries)
        out[i] = PodDevicesEntry(uid, cont, res, devs, e.alloc_resp)
    return out


def _sanitize_registered(registered: Registered) -> Registered:
    if registered is None:
        return None
    out: dict[str, list[str] | None] = {}
    changed = False
    for res, ids in registered.items():
        key = fix_string(res)
        if key in out:
            raise InvalidInputError(
                f"registered_devices has two resource names that both read back as {key!r} "
                "(lone surrogates are written as U+FFFD)"
            )
        clean = _sanitize_ids(ids)
        changed = changed or key is not res or clean is not ids
        out[key] = clean
    return out if changed else registered


def utf8_text(value: object, where: str) -> str:
    """``value`` if a ``str`` without lone surrogates (no UTF-8 file carries them); else raises
    :class:`InvalidInputError` naming ``where``."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where} must be a str, not {type(value).__name__}")
    if fix_string(value) is not value:
        raise InvalidInputError(f"{where} holds a lone surrogate, which is not UTF-8 text")
    return value
