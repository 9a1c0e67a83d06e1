"""Kubelet's DRA manager checkpoint (``dra_manager_state``), read and written as kubelet does.

The current **data** format (``Data`` JSON text with its CRC-32) is read and written; v1 (DRA
alpha) is read only, by :mod:`.dra_v1` (both: docs/node-files.md). Nil stays apart from empty
(``None``), so a file kubelet wrote is written back byte for byte.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from podstore.checkpoint import gojson
from podstore.checkpoint.bulk import collector_paused
from podstore.checkpoint.dra_types import (
    DRAClaim,
    DRADevice,
    DRAState,
    claim,
    claim_list,
    claim_of,
    device,
    objects,
)
from podstore.checkpoint.dra_v1 import V1_STRUCTURED, V1_STRUCTURED_LAYOUT, is_v1, read_v1
from podstore.checkpoint.files import DEFAULT_MAX_BYTES
from podstore.checkpoint.godecode import DecodeError, decode, decode_value
from podstore.checkpoint.goencode import to_json
from podstore.checkpoint.gotypes import STRING, UINT32, Field, Struct
from podstore.checkpoint.values import utf8_text as _text
from podstore.checkpoint.versions import has_key, read_tree
from podstore.errors import CheckpointCorruptError, CheckpointFormatError, InvalidInputError

#: The file's name in kubelet's root directory.
FILE_NAME = "dra_manager_state"


# -- Go types -----------------------------------------------------------------------------------


def _data_type(key: str, share_id: bool) -> Struct:
    return Struct(
        "checkpoint.CheckpointData",
        (
            Field("Kind", STRING, "kind", True),
            Field("APIVersion", STRING, "apiVersion", True),
            Field(key, claim_list(claim(device(share_id)))),
        ),
    )


_CHECKPOINT = Struct("checkpoint.Checkpoint", (Field("Data", STRING), Field("Checksum", UINT32)))
# Reading takes both names of the list and the share id; writing picks one layout.
_READ_DATA = Struct(
    "checkpoint.CheckpointData",
    (
        Field("Kind", STRING, "kind", True),
        Field("APIVersion", STRING, "apiVersion", True),
        Field("Entries", claim_list(claim(device(True)))),
        Field("ClaimInfoStateList", claim_list(claim(device(True)))),
    ),
)


# -- reading ------------------------------------------------------------------------------------


@collector_paused()
def read_dra_state(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> DRAState:
    """Read and verify a ``dra_manager_state`` from a path or from the file's bytes.

    Raises the errors of :func:`podstore.checkpoint.read_cpu_state`, for this file; a v1 file
    with structured resource handles is a :class:`CheckpointFormatError` naming the format.
    """
    return dra_state_from_tree(*read_tree(source, max_bytes))


@collector_paused()
def dra_state_from_tree(tree: Any, origin: str = "") -> DRAState:
    """:func:`read_dra_state` of a document parsed by :func:`.gojson.parse`."""
    if is_v1(tree):
        return read_v1(tree, origin)
    try:
        outer = decode(_CHECKPOINT, _CHECKPOINT.zero(), tree)
    except DecodeError as e:
        raise CheckpointFormatError(f"{origin}not a DRA manager checkpoint: {e}") from None
    data, stored = outer
    actual = zlib.crc32(data.encode("utf-8"))
    if actual != stored:
        raise CheckpointCorruptError(
            stored,
            actual,
            f"{origin}DRA manager checkpoint is corrupted: stored checksum {stored}, "
            f"computed {actual} (CRC-32 of Data)",
        )
    try:
        inner_tree = gojson.parse(data)
        inner = decode_value(_READ_DATA, _READ_DATA.zero(), inner_tree)
    except (DecodeError, gojson.JSONSyntaxError) as e:
        raise CheckpointFormatError(f"{origin}DRA manager checkpoint Data: {e}") from None
    kind, api_version, entries, legacy_entries = inner
    entries_key = "Entries"
    if has_key(inner_tree, "ENTRIES") or not has_key(inner_tree, "CLAIMINFOSTATELIST"):
        claims = entries
    else:
        claims, entries_key = legacy_entries, "ClaimInfoStateList"
    return DRAState(
        claims=None if claims is None else [claim_of(c) for c in claims],
        entries_key=entries_key,
        # Only a text that spells the key (in any case) can have it.
        share_ids="shareid" in data.lower() and _devices_have_share_id(inner_tree),
        kind=kind,
        api_version=api_version,
        checksum=stored,
    )


def _devices_have_share_id(tree: Any) -> bool:
    """Whether the devices in ``Data`` were written with a ``ShareID`` field."""
    if type(tree) is not tuple:
        return False
    for key, claims in tree:
        if gojson.fold_name(key) not in ("ENTRIES", "CLAIMINFOSTATELIST"):
            continue
        for item in objects(claims):
            for ckey, drivers in item:
                if gojson.fold_name(ckey) != "DRIVERSTATE" or type(drivers) is not tuple:
                    continue
                for _, state in drivers:
                    for skey, devices in state if type(state) is tuple else ():
                        if gojson.fold_name(skey) == "DEVICES":
                            for device in objects(devices):
                                if has_key(device, "SHAREID"):
                                    return True
    return False


# -- writing ------------------------------------------------------------------------------------


@collector_paused()
def dumps_dra_state(state: DRAState) -> bytes:
    """The bytes kubelet writes for ``state`` in the data format (claims under
    ``state.entries_key``, devices with ``ShareID`` when ``state.share_ids``), or for
    ``version`` ``"v1"`` in the v1 format kubelet 1.31 wrote (devices per driver, its
    whole-struct checksum).

    Raises :class:`InvalidInputError` for another version, a claim in the classic v1 layout
    (1.27–1.30: not written), a share id without ``share_ids`` (or in v1), or values of the
    wrong type.
    """
    if state.version == "v1":
        return _dumps_v1(state)
    if state.version != "data":
        raise InvalidInputError(f"version must be 'data' or 'v1', not {state.version!r}")
    if state.entries_key not in ("Entries", "ClaimInfoStateList"):
        raise InvalidInputError("entries_key must be 'Entries' or 'ClaimInfoStateList'")
    share_ids = state.share_ids is True
    t = _data_type(state.entries_key, share_ids)
    claims = _go_claims(state.claims, share_ids)
    value = [_text(state.kind, "kind"), _text(state.api_version, "api_version"), claims]
    data = gojson.encode(to_json(t, value))
    return gojson.encode({"Data": data.decode("utf-8"), "Checksum": zlib.crc32(data)})


def _dumps_v1(state: DRAState) -> bytes:
    if state.share_ids is True:
        raise InvalidInputError("share_ids: the v1 format's devices have no ShareID")
    value = ["v1", _go_claims(state.claims, False), 0]
    value[-1] = V1_STRUCTURED_LAYOUT.rules[0][1](value)
    return gojson.encode(to_json(V1_STRUCTURED, value))


def _texts(value: object, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInputError(f"{where} must be a list of str or None")
    return [_text(x, f"{where}[{i}]") for i, x in enumerate(value)]


def _go_claims(claims: object, share_ids: bool) -> list[Any] | None:
    if claims is None:
        return None
    if not isinstance(claims, list | tuple):
        raise InvalidInputError("claims must be a list of DRAClaim or None")
    return [_go_claim(c, f"claims[{i}]", share_ids) for i, c in enumerate(claims)]


def _go_claim(c: object, where: str, share_ids: bool) -> list[Any]:
    if not isinstance(c, DRAClaim):
        raise InvalidInputError(f"{where} must be a DRAClaim")
    if c.driver_name or c.class_name or c.resource_handles is not None or c.cdi_devices is not None:
        raise InvalidInputError(f"{where} is in the classic DRA v1 layout, which is not written")
    pods: dict[str, list[Any]] | None = None
    if c.pod_uids is not None:
        if isinstance(c.pod_uids, str) or not isinstance(
            c.pod_uids, set | frozenset | list | tuple
        ):
            raise InvalidInputError(f"{where}.pod_uids must be a set of str or None")
        pods = {_text(p, f"{where}.pod_uids item"): [] for p in c.pod_uids}
    drivers: dict[str, list[Any]] | None = None
    if c.driver_state is not None:
        if not isinstance(c.driver_state, dict):
            raise InvalidInputError(f"{where}.driver_state must be a dict or None")
        drivers = {
            _text(d, f"{where}.driver_state key"): [
                _go_devices(devs, f"{where}.driver_state[{d!r}]", share_ids)
            ]
            for d, devs in c.driver_state.items()
        }
    return [
        _text(c.claim_uid, f"{where}.claim_uid"),
        _text(c.claim_name, f"{where}.claim_name"),
        _text(c.namespace, f"{where}.namespace"),
        pods,
        drivers,
    ]


def _go_devices(devices: object, where: str, share_ids: bool) -> list[Any] | None:
    if devices is None:
        return None
    if not isinstance(devices, list | tuple):
        raise InvalidInputError(f"{where} must be a list of DRADevice or None")
    out = []
    for i, d in enumerate(devices):
        at = f"{where}[{i}]"
        if not isinstance(d, DRADevice):
            raise InvalidInputError(f"{at} must be a DRADevice")
        row: list[Any] = [
            _text(d.pool_name, f"{at}.pool_name"),
            _text(d.device_name, f"{at}.device_name"),
        ]
        if share_ids:
            row.append(None if d.share_id is None else _text(d.share_id, f"{at}.share_id"))
        elif d.share_id is not None:
            raise InvalidInputError(f"{at}.share_id is set but the state has share_ids=False")
        row += [
            _texts(d.request_names, f"{at}.request_names"),
            _texts(d.cdi_device_ids, f"{at}.cdi_device_ids"),
        ]
        out.append(row)
    return out
