"""The DRA manager checkpoint's first format (DRA alpha; docs/node-files.md). Read in every
layout; written (by :mod:`.dra_state`) only in 1.31's, devices per driver.

The whole struct is hashed, so the checksum changed whenever a field was added
(kubernetes#123552, #127653): only the layouts test vectors confirm are read, and a handle with
``structuredData`` set is refused (no vector shows how kubelet hashed it).
"""

from __future__ import annotations

from typing import Any

from podstore.checkpoint import gojson, spew
from podstore.checkpoint.dra_types import (
    POD_UIDS,
    STRINGS,
    UID,
    DRAClaim,
    DRAResourceHandle,
    DRAState,
    claim,
    claim_of,
    device,
    objects,
)
from podstore.checkpoint.godecode import DecodeError
from podstore.checkpoint.gotypes import CHECKSUM, STRING, Field, Struct, map_of, ptr, slice_of
from podstore.checkpoint.gotypes import Slice as SliceType
from podstore.checkpoint.versions import Layout, first_verified, has_key, spew_rule


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
    Field("ClaimUID", UID),
    Field("ClaimName", STRING),
    Field("Namespace", STRING),
    Field("PodUIDs", POD_UIDS),
)
_CDI_DEVICES = Field("CDIDevices", map_of(STRING, STRINGS))
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


V1_STRUCTURED = _v1(claim(device(False)))
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


V1_STRUCTURED_LAYOUT = Layout(
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


def is_v1(tree: Any) -> bool:
    """DRA v1 has ``version`` / ``entries``; the data format has ``Data`` and ``Checksum``."""
    return not has_key(tree, "DATA") and (has_key(tree, "VERSION") or has_key(tree, "ENTRIES"))


def read_v1(tree: Any, origin: str) -> DRAState:
    structured = any(
        has_key(claim, "DRIVERSTATE")
        for key, claims in (tree if type(tree) is tuple else ())
        if gojson.fold_name(key) == "ENTRIES"
        for claim in objects(claims)
    )
    layout = V1_STRUCTURED_LAYOUT if structured else _V1_CLASSIC_LAYOUT
    found = first_verified(tree, (layout,), "DRA manager", origin)
    _, claims, checksum = found.value
    if structured:
        out = None if claims is None else [claim_of(c, False) for c in claims]
    else:
        out = None if claims is None else [_classic_claim(c) for c in claims]
    return DRAState(claims=out, version="v1", kind="", api_version="", checksum=checksum)


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
