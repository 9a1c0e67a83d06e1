"""The DRA manager checkpoint's claims, as podstore holds them and as kubelet's Go types
declare them (shared by its two formats: :mod:`.dra_state` and :mod:`.dra_v1`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podstore.checkpoint.gotypes import STRING, Field, String, Struct, map_of, ptr, slice_of
from podstore.checkpoint.gotypes import Slice as SliceType

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
    """One resource claim: who uses it and ``driver_state``, driver → devices prepared. The
    fields below it hold the classic DRA v1 layout, empty in every other file."""

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

UID = String("types.UID")
STRINGS = slice_of(STRING)
POD_UIDS = map_of(STRING, Struct("sets.Empty"), "sets.Set[string]")


def device(share_id: bool) -> Struct:
    """``state.Device``; newer kubelets declare a ``ShareID`` after the device name."""
    fields = [Field("PoolName", STRING), Field("DeviceName", STRING)]
    if share_id:
        fields.append(Field("ShareID", ptr(UID)))
    fields += [Field("RequestNames", STRINGS), Field("CDIDeviceIDs", STRINGS)]
    return Struct("state.Device", tuple(fields))


def claim(device: Struct) -> Struct:
    """``state.ClaimInfoState`` holding devices of the given type per driver."""
    driver_state = Struct("state.DriverState", (Field("Devices", slice_of(device)),))
    return Struct(
        "state.ClaimInfoState",
        (
            Field("ClaimUID", UID),
            Field("ClaimName", STRING),
            Field("Namespace", STRING),
            Field("PodUIDs", POD_UIDS),
            Field("DriverState", map_of(STRING, driver_state)),
        ),
    )


def claim_list(claim: Struct) -> SliceType:
    """``state.ClaimInfoStateList``."""
    return SliceType("state.ClaimInfoStateList", claim)


# -- decoded values → claims ----------------------------------------------------------------------


def devices(v: list[list[Any]] | None, share_id: bool = True) -> list[DRADevice] | None:
    """Decoded ``[]state.Device`` (with or without the ``ShareID`` field) as ``DRADevice`` s."""
    if v is None:
        return None
    if share_id:
        return [DRADevice(d[0], d[1], d[3], d[4], d[2]) for d in v]
    return [DRADevice(d[0], d[1], d[2], d[3]) for d in v]


def claim_of(c: list[Any], share_id: bool = True) -> DRAClaim:
    """A decoded ``state.ClaimInfoState`` as a ``DRAClaim``."""
    uid, name, namespace, pods, drivers = c
    return DRAClaim(
        claim_uid=uid,
        claim_name=name,
        namespace=namespace,
        pod_uids=None if pods is None else frozenset(pods),
        driver_state=(
            None if drivers is None else {d: devices(s[0], share_id) for d, s in drivers.items()}
        ),
    )


def objects(v: Any) -> list[Any]:
    """The JSON objects in a parsed array (nothing for anything else)."""
    return [x for x in v if type(x) is tuple] if type(v) is list else []
