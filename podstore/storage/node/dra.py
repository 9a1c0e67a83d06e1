"""The DRA manager's state as items and rows.

Items: one per claim (``dra:CLAIM_UID``), its devices compared as a multiset and named in its
event as ``driver/pool/device``. Claims keep their place in the list; a new one goes last.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from podstore.checkpoint import DRAClaim, DRADevice, DRAResourceHandle, DRAState
from podstore.errors import InvalidInputError
from podstore.storage.node import files
from podstore.storage.node.items import Item, Items, Key, Part, dumps
from podstore.storage.sql import node as sql

KIND = FAMILY = "dra"
PREFIX = "dra:"


def device_key(driver: str, pool: str, device: str) -> str:
    """How a DRA device is named in the history and by ``owners``: ``driver/pool/device``
    (a driver name and a device name hold no ``/``; a pool name may)."""
    return f"{driver}/{pool}/{device}"


def split_device_key(text: str) -> tuple[str, str, str] | None:
    """``(driver, pool, device)`` of a ``driver/pool/device`` name, None when not one."""
    driver, sep, rest = text.partition("/")
    pool, sep2, device = rest.rpartition("/")
    if not (sep and sep2 and driver and pool and device):
        return None
    return driver, pool, device


def _device_json(d: DRADevice) -> dict[str, Any]:
    out: dict[str, Any] = {"pool": d.pool_name, "device": d.device_name}
    if d.share_id is not None:
        out["shareID"] = d.share_id
    out["requests"] = d.request_names
    out["cdi"] = d.cdi_device_ids
    return out


def _canon_device(x: dict[str, Any]) -> str:
    return dumps(
        {
            **x,
            "requests": None if x["requests"] is None else sorted(x["requests"]),
            "cdi": None if x["cdi"] is None else sorted(x["cdi"]),
        }
    )


def _classic(c: DRAClaim) -> dict[str, Any]:
    return {
        "driverName": c.driver_name,
        "className": c.class_name,
        "resourceHandles": None
        if c.resource_handles is None
        else [{"driverName": h.driver_name, "data": h.data} for h in c.resource_handles],
        "cdiDevices": c.cdi_devices,
    }


def claim_item(c: DRAClaim, classic: bool) -> Item:
    drivers = (
        None
        if c.driver_state is None
        else {
            d: None if devs is None else [_device_json(x) for x in devs]
            for d, devs in sorted(c.driver_state.items())
        }
    )
    shown: dict[str, Any] = {
        "name": c.claim_name,
        "namespace": c.namespace,
        "pods": None if c.pod_uids is None else sorted(c.pod_uids),
        "drivers": drivers,
    }
    if classic:
        shown["classic"] = _classic(c)
    canon = dict(shown)
    if drivers is not None:
        canon["drivers"] = {
            d: None if devs is None else sorted(_canon_device(x) for x in devs)
            for d, devs in drivers.items()
        }
    named = sorted(
        {
            device_key(d, x.pool_name, x.device_name)
            for d, devs in (c.driver_state or {}).items()
            for x in devs or ()
        }
    )
    return Item(dumps(shown), dumps(canon), (c, classic), tuple(named))


def wanted(state: DRAState) -> tuple[Items, str, dict[str, Any]]:
    """The items (in list order), format and form of a DRA manager state.

    Raises InvalidInputError for a claim UID listed twice (the store keys claims by UID).
    """
    items: Items = {}
    classic = state.version == "v1"
    for c in state.claims or ():
        key: Key = (None, None, PREFIX + c.claim_uid)
        if key in items:
            raise InvalidInputError(
                f"claim {c.claim_uid!r} is listed twice; the store keeps one entry per claim UID"
            )
        items[key] = claim_item(c, classic and c.driver_state is None)
    form = {
        "entries_key": state.entries_key,
        "share_ids": state.share_ids,
        "kind": state.kind,
        "api_version": state.api_version,
        "claims_null": state.claims is None,
    }
    return items, state.version, form


def _claims(conn: sqlite3.Connection, uid: str | None = None) -> list[tuple[int, DRAClaim, bool]]:
    """(row id, claim, classic v1?) of every claim (or of ``uid``), in list order."""
    one = () if uid is None else (uid,)
    claims: dict[int, tuple[DRAClaim, bool]] = {}
    for cid, _pos, cuid, name, ns, pods_null, drivers_null, classic in conn.execute(
        sql.DRA_CLAIMS if uid is None else sql.DRA_CLAIM, one
    ):
        c = DRAClaim(
            str(cuid),
            str(name),
            str(ns),
            pod_uids=None if pods_null else frozenset(),
            driver_state=None if drivers_null else {},
        )
        if classic is not None:
            extra = json.loads(classic)
            c.driver_name = extra["driverName"]
            c.class_name = extra["className"]
            handles = extra["resourceHandles"]
            c.resource_handles = (
                None
                if handles is None
                else [DRAResourceHandle(h["driverName"], h["data"]) for h in handles]
            )
            c.cdi_devices = extra["cdiDevices"]
        claims[int(cid)] = (c, classic is not None)
    rows: tuple[Iterable[tuple[Any, ...]], ...]
    if uid is None:
        rows = (
            conn.execute(sql.DRA_PODS),
            conn.execute(sql.DRA_DRIVERS),
            conn.execute(sql.DRA_DEVICES),
        )
    else:
        ids = [(cid,) for cid in claims]
        rows = tuple(
            [r for i in ids for r in conn.execute(q, i)]
            for q in (sql.DRA_PODS_OF, sql.DRA_DRIVERS_OF, sql.DRA_DEVICES_OF)
        )
    _fill(claims, *rows)
    return [(cid, c, classic) for cid, (c, classic) in claims.items()]


def _fill(
    claims: dict[int, tuple[DRAClaim, bool]],
    pod_rows: Iterable[tuple[Any, ...]],
    driver_rows: Iterable[tuple[Any, ...]],
    device_rows: Iterable[tuple[Any, ...]],
) -> None:
    pods: dict[int, set[str]] = {}
    for cid, pod in pod_rows:
        pods.setdefault(int(cid), set()).add(str(pod))
    for cid, (c, _classic) in claims.items():
        if c.pod_uids is not None:
            c.pod_uids = frozenset(pods.get(cid, ()))
    for cid, driver, devices_null in driver_rows:
        state = claims[int(cid)][0].driver_state
        assert state is not None
        state[str(driver)] = None if devices_null else []
    for cid, driver, pool, device, share, requests, cdi in device_rows:
        state = claims[int(cid)][0].driver_state
        assert state is not None
        listed = state[str(driver)]
        assert listed is not None
        listed.append(
            DRADevice(
                str(pool),
                str(device),
                None if requests is None else json.loads(requests),
                None if cdi is None else json.loads(cdi),
                share,
            )
        )


def claim(conn: sqlite3.Connection, uid: str) -> DRAClaim | None:
    """The claim of ``uid`` as stored (None: not known)."""
    found = _claims(conn, uid)
    return found[0][1] if found else None


def _stored(conn: sqlite3.Connection) -> Items:
    if files.get(conn, KIND) is None:
        return {}
    return {
        (None, None, PREFIX + c.claim_uid): claim_item(c, classic)
        for _cid, c, classic in _claims(conn)
    }


def _remove(conn: sqlite3.Connection, key: Key, item: Item) -> None:
    conn.execute(sql.DRA_DELETE_CLAIM, (key[2][len(PREFIX) :],))


def _write(conn: sqlite3.Connection, key: Key, item: Item, old: Item | None) -> None:
    uid = key[2][len(PREFIX) :]
    if old is not None:
        (position,) = conn.execute(sql.DRA_POSITION, (uid,)).fetchone()
        _remove(conn, key, old)
    else:
        (position,) = conn.execute(sql.DRA_NEXT_POSITION).fetchone()
    c, classic = item.value
    cid = conn.execute(
        sql.DRA_INSERT_CLAIM,
        (
            position,
            uid,
            c.claim_name,
            c.namespace,
            c.pod_uids is None,
            c.driver_state is None,
            dumps(_classic(c)) if classic else None,
        ),
    ).lastrowid
    conn.executemany(sql.DRA_INSERT_POD, [(cid, p) for p in sorted(c.pod_uids or ())])
    drivers = c.driver_state or {}
    conn.executemany(
        sql.DRA_INSERT_DRIVER, [(cid, d, devs is None) for d, devs in sorted(drivers.items())]
    )
    conn.executemany(
        sql.DRA_INSERT_DEVICE,
        [
            (
                cid,
                d,
                pos,
                x.pool_name,
                x.device_name,
                x.share_id,
                None if x.request_names is None else dumps(x.request_names),
                None if x.cdi_device_ids is None else dumps(x.cdi_device_ids),
            )
            for d, devs in drivers.items()
            for pos, x in enumerate(devs or ())
        ],
    )


PART = Part(KIND, FAMILY, _stored, _remove, _write)


def read_state(conn: sqlite3.Connection) -> DRAState | None:
    """The DRA manager state the store holds (None: none was loaded)."""
    found = files.get(conn, KIND)
    if found is None:
        return None
    form = found.form
    claims = [c for _cid, c, _classic in _claims(conn)]
    return DRAState(
        claims=None if form.get("claims_null") and not claims else claims,
        version=found.version,
        entries_key=str(form.get("entries_key", "Entries")),
        share_ids=bool(form.get("share_ids", False)),
        kind=str(form.get("kind", "DRACheckpoint")),
        api_version=str(form.get("api_version", "checkpoint.dra.kubelet.k8s.io/v1")),
    )
