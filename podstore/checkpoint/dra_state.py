"""Kubelet's DRA manager checkpoint (``dra_manager_state``), read and written as kubelet does.

Two formats:

- **data** (the current one): ``{"Data":"<JSON text>","Checksum":<uint32>}`` where the
  checksum is CRC-32 (IEEE) of the ``Data`` string's bytes and ``Data`` holds
  ``{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","Entries":[…]}``:
  one entry per claim (UID, name, namespace, the pods using it, and per driver the devices
  prepared: pool, device, request names, CDI device ids, and in newer kubelets a share id).
  The first kubelets of this format named the list ``ClaimInfoStateList``.
- **v1** (DRA alpha, ``{"version":"v1","entries":[…],"checksum":…}``): the whole struct
  through go-spew and FNV-1a 32, so the checksum changed whenever a field was added
  (kubernetes#123552, #127653). Read in the two layouts test vectors confirm: the classic one
  (driver, class, resource handles of ``resource.k8s.io/v1alpha2`` with their
  ``StructuredData`` field, CDI devices per driver — or the same without resource handles, which
  kubelet still accepted) and the structured one (devices per driver). A handle with
  ``structuredData`` set is refused: no vector shows how kubelet rendered it.

What comes back keeps nil apart from empty (``None`` stands for JSON ``null``) so that writing
a file kubelet wrote gives its bytes; only the data format is written.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.files import DEFAULT_MAX_BYTES
from podstore.checkpoint.godecode import DecodeError, decode, decode_value
from podstore.checkpoint.goencode import to_json
from podstore.checkpoint.gotypes import (
    CHECKSUM,
    STRING,
    UINT32,
    Field,
    String,
    Struct,
    map_of,
    ptr,
    slice_of,
)
from podstore.checkpoint.gotypes import Slice as SliceType
from podstore.checkpoint.values import utf8_text as _text
from podstore.checkpoint.versions import Layout, first_verified, parse, read_tree, spew_rule
from podstore.errors import CheckpointCorruptError, CheckpointFormatError, InvalidInputError

#: The file's name in kubelet's root directory.
FILE_NAME = "dra_manager_state"
#: The ``kind`` and ``apiVersion`` kubelet writes into ``Data``.
KIND = "DRACheckpoint"
API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"


@dataclass
class DRADevice:
    """A device a DRA driver prepared for a claim."""

    pool_name: str
    device_name: str
    request_names: list[str] | None = None
    cdi_device_ids: list[str] | None = None
    #: the share of a device allocated several times (consumable capacity), when any
    share_id: str | None = None


@dataclass
class DRAResourceHandle:
    """DRA v1 (alpha) only: opaque data for one kubelet plugin."""

    driver_name: str
    data: str


@dataclass
class DRAClaim:
    """One resource claim: who uses it and, per driver, the devices prepared for it.

    ``driver_state`` maps driver name → devices. The other fields below it hold the classic
    DRA v1 layout (driver, class, resource handles, CDI devices per driver) and are empty in
    every other file.
    """

    claim_uid: str
    claim_name: str
    namespace: str
    pod_uids: frozenset[str] | None = field(default_factory=frozenset)
    driver_state: dict[str, list[DRADevice] | None] | None = field(default_factory=dict)
    driver_name: str = ""
    class_name: str = ""
    resource_handles: list[DRAResourceHandle] | None = None
    cdi_devices: dict[str, list[str] | None] | None = None


@dataclass
class DRAState:
    """A verified ``dra_manager_state``: its claims (``None``: JSON ``null``) and how it was
    written — ``version`` ``"data"`` or ``"v1"``; for ``"data"``, the name of the claim list
    (``entries_key``), whether devices carry a ``ShareID`` field (``share_ids``) and the
    ``kind`` / ``api_version`` written. ``checksum`` is the stored checksum that verified."""

    claims: list[DRAClaim] | None
    version: str = "data"
    entries_key: str = "Entries"
    share_ids: bool = False
    kind: str = KIND
    api_version: str = API_VERSION
    checksum: int = 0


# -- Go types -----------------------------------------------------------------------------------

_UID = String("types.UID")
_STRINGS = slice_of(STRING)
_POD_UIDS = map_of(STRING, Struct("sets.Empty"), "sets.Set[string]")


def _device(share_id: bool) -> Struct:
    fields = [Field("PoolName", STRING), Field("DeviceName", STRING)]
    if share_id:
        fields.append(Field("ShareID", ptr(_UID)))
    fields += [Field("RequestNames", _STRINGS), Field("CDIDeviceIDs", _STRINGS)]
    return Struct("state.Device", tuple(fields))


def _claim(device: Struct) -> Struct:
    driver_state = Struct("state.DriverState", (Field("Devices", slice_of(device)),))
    return Struct(
        "state.ClaimInfoState",
        (
            Field("ClaimUID", _UID),
            Field("ClaimName", STRING),
            Field("Namespace", STRING),
            Field("PodUIDs", _POD_UIDS),
            Field("DriverState", map_of(STRING, driver_state)),
        ),
    )


def _list(claim: Struct) -> SliceType:
    return SliceType("state.ClaimInfoStateList", claim)


def _data_type(key: str, share_id: bool) -> Struct:
    return Struct(
        "checkpoint.CheckpointData",
        (
            Field("Kind", STRING, "kind", True),
            Field("APIVersion", STRING, "apiVersion", True),
            Field(key, _list(_claim(_device(share_id)))),
        ),
    )


_CHECKPOINT = Struct("checkpoint.Checkpoint", (Field("Data", STRING), Field("Checksum", UINT32)))
# Reading takes both names of the list and the share id; writing picks one layout.
_READ_DATA = Struct(
    "checkpoint.CheckpointData",
    (
        Field("Kind", STRING, "kind", True),
        Field("APIVersion", STRING, "apiVersion", True),
        Field("Entries", _list(_claim(_device(True)))),
        Field("ClaimInfoStateList", _list(_claim(_device(True)))),
    ),
)


def _unsupported_structured_data(cur: Any, v: Any) -> Any:
    raise DecodeError(
        "structuredData (DRA structured parameters in the v1 format) is not supported: "
        "no test vector shows how kubelet hashed it"
    )


_STRUCTURED_HANDLE = Struct(
    "v1alpha2.StructuredResourceHandle", unmarshal=_unsupported_structured_data
)
_HANDLE = Struct(
    "v1alpha2.ResourceHandle",
    (
        Field("DriverName", STRING, "driverName", True),
        Field("Data", STRING, "data", True),
        Field(
            "StructuredData",
            ptr(
                Struct("v1alpha2.StructuredResourceHandle", unmarshal=_unsupported_structured_data)
            ),
            "structuredData",
            True,
        ),
    ),
)
_CLASSIC_FIELDS = (
    Field("DriverName", STRING),
    Field("ClassName", STRING),
    Field("ClaimUID", _UID),
    Field("ClaimName", STRING),
    Field("Namespace", STRING),
    Field("PodUIDs", _POD_UIDS),
)
_CDI_DEVICES = Field("CDIDevices", map_of(STRING, _STRINGS))
_CLASSIC_CLAIM = Struct(
    "state.ClaimInfoState",
    (*_CLASSIC_FIELDS, Field("ResourceHandles", slice_of(_HANDLE)), _CDI_DEVICES),
)
# Kubelet 1.28–1.30 also verified a file as if written before resource handles existed.
_CLASSIC_CLAIM_WITHOUT_HANDLES = Struct(
    "state.ClaimInfoStateWithoutResourceHandles", (*_CLASSIC_FIELDS, _CDI_DEVICES)
)


def _v1(claim: Struct, name: str = "state.DRAManagerCheckpoint", list_name: str = "") -> Struct:
    entries = SliceType(list_name or "state.ClaimInfoStateList", claim)
    return Struct(
        name,
        (
            Field("Version", STRING, "version"),
            Field("Entries", entries, "entries", True),
            Field("Checksum", CHECKSUM, "checksum"),
        ),
    )


V1_STRUCTURED = _v1(_claim(_device(False)))
V1_CLASSIC = _v1(_CLASSIC_CLAIM)
V1_CLASSIC_WITHOUT_HANDLES = _v1(
    _CLASSIC_CLAIM_WITHOUT_HANDLES,
    "state.DRAManagerCheckpointWithoutResourceHandles",
    "state.ClaimInfoStateListWithoutResourceHandles",
)


def _without_handles(value: list[Any]) -> int:
    # Kubelet rebuilds the entries without their handles, with Version "v1" whatever the file
    # said, and renames the two types back before hashing.
    claims = [[*c[:6], c[7]] for c in value[1] or ()]
    return spew.checksum_value(
        V1_CLASSIC_WITHOUT_HANDLES,
        ["v1", claims, 0],
        [
            ("DRAManagerCheckpointWithoutResourceHandles", "DRAManagerCheckpoint"),
            ("ClaimInfoStateListWithoutResourceHandles", "ClaimInfoStateList"),
        ],
    )


def _v1_initial() -> list[Any]:
    return ["v1", [], 0]


_V1_STRUCTURED_LAYOUT = Layout(
    "v1 (structured)",
    V1_STRUCTURED,
    _v1_initial,
    (spew_rule(V1_STRUCTURED, "DRAManagerCheckpoint"),),
)
_V1_CLASSIC_LAYOUT = Layout(
    "v1 (classic)",
    V1_CLASSIC,
    _v1_initial,
    (
        spew_rule(V1_CLASSIC, "DRAManagerCheckpoint"),
        ("DRAManagerCheckpoint without resource handles", _without_handles),
    ),
)


# -- reading ------------------------------------------------------------------------------------


def read_dra_state(
    source: str | os.PathLike[str] | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> DRAState:
    """Read and verify a ``dra_manager_state`` from a path or from the file's bytes.

    Raises the errors of :func:`podstore.checkpoint.read_cpu_state`, for this file; a v1 file
    with structured resource handles is a :class:`CheckpointFormatError` naming the format.
    """
    return dra_state_from_tree(*read_tree(source, max_bytes))


def parse_dra_state(text: str, origin: str = "") -> DRAState:
    """:func:`read_dra_state` of text already read (``errors="surrogateescape"``)."""
    return dra_state_from_tree(parse(text, origin), origin)


def dra_state_from_tree(tree: Any, origin: str = "") -> DRAState:
    """:func:`parse_dra_state` of a document parsed by :func:`.gojson.parse`."""
    if _is_v1(tree):
        return _read_v1(tree, origin)
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
    if _has_key(inner_tree, "ENTRIES") or not _has_key(inner_tree, "CLAIMINFOSTATELIST"):
        claims = entries
    else:
        claims, entries_key = legacy_entries, "ClaimInfoStateList"
    return DRAState(
        claims=None if claims is None else [_claim_of(c) for c in claims],
        entries_key=entries_key,
        # Only a text that spells the key (in any case) can have it.
        share_ids="shareid" in data.lower() and _devices_have_share_id(inner_tree),
        kind=kind,
        api_version=api_version,
        checksum=stored,
    )


def _has_key(tree: Any, folded: str) -> bool:
    return type(tree) is tuple and any(gojson.fold_name(k) == folded for k, _ in tree)


def _objects(v: Any) -> list[Any]:
    return [x for x in v if type(x) is tuple] if type(v) is list else []


def _is_v1(tree: Any) -> bool:
    """DRA v1 has ``version`` / ``entries``; the data format has ``Data`` and ``Checksum``."""
    return not _has_key(tree, "DATA") and (_has_key(tree, "VERSION") or _has_key(tree, "ENTRIES"))


def _devices_have_share_id(tree: Any) -> bool:
    """Whether the devices in ``Data`` were written with a ``ShareID`` field."""
    if type(tree) is not tuple:
        return False
    for key, claims in tree:
        if gojson.fold_name(key) not in ("ENTRIES", "CLAIMINFOSTATELIST"):
            continue
        for claim in _objects(claims):
            for ckey, drivers in claim:
                if gojson.fold_name(ckey) != "DRIVERSTATE" or type(drivers) is not tuple:
                    continue
                for _, state in drivers:
                    for skey, devices in state if type(state) is tuple else ():
                        if gojson.fold_name(skey) == "DEVICES":
                            for device in _objects(devices):
                                if _has_key(device, "SHAREID"):
                                    return True
    return False


def _read_v1(tree: Any, origin: str) -> DRAState:
    structured = any(
        _has_key(claim, "DRIVERSTATE")
        for key, claims in (tree if type(tree) is tuple else ())
        if gojson.fold_name(key) == "ENTRIES"
        for claim in _objects(claims)
    )
    layout = _V1_STRUCTURED_LAYOUT if structured else _V1_CLASSIC_LAYOUT
    found = first_verified(tree, (layout,), "DRA manager", origin)
    _, claims, checksum = found.value
    if structured:
        out = None if claims is None else [_claim_of(c, False) for c in claims]
    else:
        out = None if claims is None else [_classic_claim(c) for c in claims]
    return DRAState(claims=out, version="v1", kind="", api_version="", checksum=checksum)


def _devices(v: list[list[Any]] | None, share_id: bool = True) -> list[DRADevice] | None:
    if v is None:
        return None
    if share_id:
        return [DRADevice(d[0], d[1], d[3], d[4], d[2]) for d in v]
    return [DRADevice(d[0], d[1], d[2], d[3]) for d in v]


def _claim_of(c: list[Any], share_id: bool = True) -> DRAClaim:
    uid, name, namespace, pods, drivers = c
    return DRAClaim(
        claim_uid=uid,
        claim_name=name,
        namespace=namespace,
        pod_uids=None if pods is None else frozenset(pods),
        driver_state=(
            None if drivers is None else {d: _devices(s[0], share_id) for d, s in drivers.items()}
        ),
    )


def _classic_claim(c: list[Any]) -> DRAClaim:
    driver, class_name, uid, name, namespace, pods, handles, cdi = c
    return DRAClaim(
        claim_uid=uid,
        claim_name=name,
        namespace=namespace,
        pod_uids=None if pods is None else frozenset(pods),
        driver_state=None,
        driver_name=driver,
        class_name=class_name,
        resource_handles=None
        if handles is None
        else [DRAResourceHandle(h[0], h[1]) for h in handles],
        cdi_devices=cdi,
    )


# -- writing ------------------------------------------------------------------------------------


def dumps_dra_state(state: DRAState) -> bytes:
    """The bytes kubelet writes for ``state`` in the data format: ``Data`` is ``json.Marshal``
    of the claims (under ``state.entries_key``, devices with a ``ShareID`` field when
    ``state.share_ids``), ``Checksum`` its CRC-32.

    Raises :class:`InvalidInputError` for a v1 state (kubelet no longer writes v1), a claim in
    the classic v1 layout, a share id without ``share_ids``, or values of the wrong type.
    """
    if state.version != "data":
        raise InvalidInputError(f"only the data format is written, not {state.version!r}")
    if state.entries_key not in ("Entries", "ClaimInfoStateList"):
        raise InvalidInputError("entries_key must be 'Entries' or 'ClaimInfoStateList'")
    share_ids = state.share_ids is True
    t = _data_type(state.entries_key, share_ids)
    claims = _go_claims(state.claims, share_ids)
    value = [_text(state.kind, "kind"), _text(state.api_version, "api_version"), claims]
    data = gojson.encode(to_json(t, value))
    return gojson.encode({"Data": data.decode("utf-8"), "Checksum": zlib.crc32(data)})


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
